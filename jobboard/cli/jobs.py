"""The commands on the board's jobs and the trash: post, list, trash, cancel, trashed."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobboard.board.contract import JobBoard
from jobboard.cli.command import (
    EXIT_NOT_MET,
    EXIT_OK,
    PROG,
    CommandError,
    group_text,
    job_name,
    key_text,
    positive_whole_number,
    seconds,
)
from jobboard.cli.output import first_line, format_table, format_time, print_json
from jobboard.errors import JobNotFound
from jobboard.job import Job, JobState, ListedJob, Priority, TrashedJob

DEFAULT_TRASH_REASON = "trashed from the command line"
DEFAULT_CANCEL_REASON = "cancelled from the command line"


# -- output helpers ---------------------------------------------------------


def attempts_text(attempts: int, max_attempts: int | None) -> str:
    """``attempts`` or ``attempts/max_attempts``."""
    return str(attempts) if max_attempts is None else f"{attempts}/{max_attempts}"


def job_record(job: Job, state: JobState, owner: str | None) -> dict[str, Any]:
    """Every field of ``job`` plus its state and owner (no I/O)."""
    record = asdict(job)
    record["priority"] = job.priority.name.lower()
    record["state"] = state.value
    record["owner"] = owner
    return record


# -- commands ---------------------------------------------------------------


def post_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", type=job_name, help="what to do (a handler name; not jobboard.*: the library's)")
    parser.add_argument("--details", default=None, metavar="JSON",
                        help="job details, a JSON object; @PATH reads it from a file, - from stdin")
    parser.add_argument("--priority", type=_priority, default=Priority.NORMAL,
                        help="very_low, low, normal (default), high or very_high (or -2..2)")
    parser.add_argument("--max-attempts", type=positive_whole_number, default=None, metavar="N",
                        help="times the job may be handed out, 1 or more (default: the board's)")
    parser.add_argument("--after", nargs="+", action="extend", default=[], metavar="JOB_ID",
                        help="jobs that must be consumed first")
    parser.add_argument("--keep-result", action="store_true",
                        help="keep the consume result for `jobboard result` / `wait` (for the board's result_ttl)")
    parser.add_argument("--key", type=key_text, default=None, metavar="KEY",
                        help="idempotency key: while a job posted with it is on the board (or settled "
                             "within the board's key_retention), print that job's id and post nothing")
    parser.add_argument("--delay", type=seconds, default=None, metavar="SECONDS",
                        help="not claimable until SECONDS from now (listed meanwhile)")
    parser.add_argument("--group", default=None, metavar="GROUP", type=group_text,
                        help="the flow-control group whose limit bounds the job (see `jobboard limit`)")


def _priority(text: str) -> Priority:
    """A priority name or its integer value (``high``, ``1``)."""
    try:
        return Priority.parse(int(text) if text.strip().lstrip("+-").isdigit() else text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_details(text: str | None) -> dict[str, Any]:
    """``--details``: a JSON object, ``@path`` (read from a file) or ``-`` (read from stdin).

    :raises CommandError: the file cannot be read, or what was read is not a JSON object.
    """
    if text is None:
        return {}
    source = "--details"
    if text == "-":
        source, text = "--details from stdin", sys.stdin.read()
    elif text.startswith("@"):
        source = f"--details file {text[1:]!r}"
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {source}: {getattr(error, 'strerror', None) or error}") from None
    try:
        details = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{source} is not valid JSON: {error}") from None
    if not isinstance(details, dict):
        raise CommandError(f"{source} must be a JSON object ({{...}}), not {json_kind(details)}")
    return details


def json_kind(value: object) -> str:
    """What JSON calls ``value``'s kind (for a message): null, a boolean, a number, a string or an array."""
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "an array"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


async def post(board: JobBoard, args: argparse.Namespace) -> int:
    """Post one job and print its id (a keyed post that found another job of its key says so on stderr)."""
    details = parse_details(args.details)
    job = await board.post(
        args.name, details, priority=args.priority,
        depends_on=args.after, max_attempts=args.max_attempts, key=args.key, delay=args.delay,
        keep_result=args.keep_result, group=args.group,
    )
    if args.key is not None and (job.name != args.name or dict(job.details) != details):
        print(f"{PROG}: note: key {args.key!r} already names {job.id} ({job.name}, other details): nothing new "
              "was posted", file=sys.stderr)
    print(job.id)
    return 0


def list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unclaimed", action="store_true", help="only jobs in state unclaimed")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


async def listed_jobs(board: JobBoard, *, only_unclaimed: bool = False) -> list[ListedJob]:
    """Every job on the board in board order, with its state and owner: ONE listing of the board
    (``board.listing()``: memory://, zookeeper:// and redis:// make no read per job)."""
    return [item async for item in board.listing(only_unclaimed=only_unclaimed)]


Column = tuple[str, Callable[[Mapping[str, Any]], str]]
LIST_COLUMNS: tuple[Column, ...] = (
    ("id", lambda r: r["id"]),
    ("name", lambda r: r["name"]),
    ("priority", lambda r: r["priority"]),
    ("state", lambda r: r["state"]),
    ("owner", lambda r: r["owner"] or "-"),
    ("attempts", lambda r: attempts_text(r["attempts"], r["max_attempts"])),
    ("last_error", lambda r: error_cell(r["last_error"])),
)
"""The table of ``list``: a header and how each cell is made from a job record (one line per column)."""


async def list_jobs(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the jobs on the board, in board order (one listing: no read per job)."""
    records = [job_record(item.job, item.state, item.owner)
               for item in await listed_jobs(board, only_unclaimed=args.unclaimed)]
    if args.json:
        print_json(records)
        return 0
    columns = list_columns(records, time.time())
    print(format_table([header for header, _ in columns], [[cell(record) for _, cell in columns] for record in records]))
    return 0


def list_columns(records: list[dict[str, Any]], now: float) -> tuple[Column, ...]:
    """:data:`LIST_COLUMNS`, with ``progress`` when some running job reported progress and ``due``
    when some job is not claimable yet (posted with a delay)."""
    columns = LIST_COLUMNS
    if any(record["progress"] for record in records):
        columns = (*columns[:6], ("progress", lambda r: progress_text(r["progress"], 30)), *columns[6:])
    if any(_not_due(record, now) for record in records):
        columns = (*columns[:4], ("due", lambda r: due_text(r, now)), *columns[4:])
    return columns


def _not_due(record: Mapping[str, Any], now: float) -> bool:
    return record["state"] == JobState.UNCLAIMED.value and (record["not_before"] or 0.0) > now


def due_text(record: Mapping[str, Any], now: float) -> str:
    """When a delayed job becomes claimable: ``in 4s (2026-01-02T03:04:05+00:00)``; ``-`` if it is."""
    if not _not_due(record, now):
        return "-"
    left = math.ceil(record["not_before"] - now)
    hours, minutes, seconds = left // 3600, left // 60 % 60, left % 60
    relative = f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
    return f"in {relative} ({format_time(record['not_before'])})"


def progress_text(progress: Mapping[str, Any] | None, width: int = 200) -> str:
    """A job record's progress as ``42% note`` (``-`` if none)."""
    if not progress:
        return "-"
    text = f"{progress['fraction']:.0%} {' '.join(str(progress['note']).split())}".rstrip()
    return text if len(text) <= width else text[:width - 3] + "..."


def error_cell(error: Mapping[str, Any] | None) -> str:
    """A job record's last error as a short table cell (``-`` if none)."""
    if not error:
        return "-"
    text = f"{error['type']}: {' '.join(str(error['message']).split())}"
    return text if len(text) <= 60 else text[:57] + "..."


def trash_arguments(parser: argparse.ArgumentParser, default_reason: str) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="the jobs' ids (unclaimed, waiting or claimed)")
    parser.add_argument("--reason", default=default_reason, help=f"why (kept with each job; default {default_reason!r})")


def trashing(verb: str) -> Callable[[JobBoard, argparse.Namespace], Awaitable[int]]:
    """``trash`` and ``cancel``: move jobs to the trash without claiming them (no attempt is
    counted; waiting jobs too), revoking a claim (and so stopping its handler) where there is one.
    Each id is tried; exit 1 if any was not on the board (one error line each)."""

    async def command(board: JobBoard, args: argparse.Namespace) -> int:
        missing = 0
        for job_id in args.ids:
            try:
                running = await board.owner(job_id)
                await board.cancel(job_id, args.reason)
            except JobNotFound as error:
                missing += 1
                print(f"{PROG}: error: {' '.join(str(error).split()) or job_id}", file=sys.stderr)
                continue
            revoked = f" (its claim by {running} revoked)" if running else ""
            print(f"{verb} {job_id}{revoked}: {args.reason}")
        return EXIT_NOT_MET if missing else EXIT_OK

    return command


def trashed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list (full reasons and last errors)")


async def list_trashed(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the trash, oldest first, with reasons (the first line of each in the table)."""
    items: list[TrashedJob] = [item async for item in board.trashed()]
    if getattr(args, "json", False):
        print_json([{**job_record(item.job, JobState.TRASHED, None), "trash_reason": item.reason,
                     "trashed_at": item.trashed_at} for item in items])
        return 0
    rows = [(i.job.id, i.job.name, format_time(i.trashed_at), first_line(i.reason)) for i in items]
    print(format_table(("id", "name", "trashed_at", "reason"), rows))
    return 0
