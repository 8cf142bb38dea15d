"""The commands on the trash: ``purge`` (drop old entries) and ``requeue`` (put jobs back on the board)."""

from __future__ import annotations

import argparse
import re
import sys

from jobboard.board.contract import JobBoard
from jobboard.cli.command import EXIT_NOT_MET, PROG, UsageError
from jobboard.cli.output import print_json
from jobboard.errors import InvalidJob, JobNotFound

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def duration(text: str) -> float:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w`` in seconds."""
    found = DURATION.match(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 90, 45s, 30m, 12h, 7d, 2w)")
    return float(found.group(1)) * UNITS[(found.group(2) or "s").lower()]


def purge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Remove from the trash the jobs trashed at least DURATION ago."
    parser.epilog = "example:\n  jobboard purge --older-than 7d --board zookeeper://127.0.0.1:2181/jobs"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--older-than", type=duration, required=True, metavar="DURATION",
                        help="age of the trash entries to remove: 90 (seconds), 45s, 30m, 12h, 7d, 2w; 0: all")
    parser.add_argument("--json", action="store_true", help='print {"purged": N} instead of a sentence')


async def purge(board: JobBoard, args: argparse.Namespace) -> int:
    """Remove old trash entries and say how many."""
    count = await board.purge(older_than=args.older_than)
    if args.json:
        print_json({"purged": count, "older_than": args.older_than})
    else:
        print(f"purged {count} job(s) trashed at least {args.older_than:g}s ago")
    return 0


def requeue_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Put trashed jobs back on the board, unclaimed, with their ids. A job trashed "
                          "because a dependency was (it never got that result) is refused: post it again.")
    parser.epilog = ("examples:\n  jobboard requeue 2-0000000000017 2-0000000000018\n"
                     "  jobboard requeue --name resize --reset-attempts\n  jobboard requeue --all --json")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("ids", nargs="*", metavar="ID", help="ids of trashed jobs")
    parser.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="every trashed job with this name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every job in the trash")
    parser.add_argument("--reset-attempts", action="store_true",
                        help="count the jobs' attempts from 0 again (else a job that used its max_attempts "
                             "goes back to the trash at its next claim)")
    parser.add_argument("--json", action="store_true",
                        help='print {"requeued": [ids], "failed": {id: reason}} instead of lines')


async def _chosen(board: JobBoard, args: argparse.Namespace) -> list[str]:
    """The ids the arguments name (exactly one way of naming them)."""
    ways = sum((bool(args.ids), bool(args.name), args.all))
    if ways != 1:
        raise UsageError("name the jobs one way: IDs, --name NAME or --all")
    if args.ids:
        return list(dict.fromkeys(args.ids))
    names = set(args.name)
    return [item.job.id async for item in board.trashed() if args.all or item.job.name in names]


async def requeue(board: JobBoard, args: argparse.Namespace) -> int:
    """Requeue each chosen job; exit 1 if any could not be."""
    requeued: list[str] = []
    failed: dict[str, str] = {}
    for job_id in await _chosen(board, args):
        try:
            await board.requeue(job_id, reset_attempts=args.reset_attempts)
        except (JobNotFound, InvalidJob) as error:
            failed[job_id] = " ".join(str(error).split())
            continue
        requeued.append(job_id)
    if args.json:
        print_json({"requeued": requeued, "failed": failed})
    else:
        for job_id in requeued:
            print(f"requeued {job_id}")
        for job_id, why in failed.items():
            print(f"{PROG}: error: not requeued {job_id}: {why}", file=sys.stderr)
        if not requeued and not failed:
            print("nothing to requeue")
    return EXIT_NOT_MET if failed else 0
