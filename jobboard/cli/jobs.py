"""The commands on single jobs and the trash: post, list, show, trash, cancel, trashed."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobboard.board import JobBoard
from jobboard.cli.command import CommandError
from jobboard.cli.output import first_line, format_table, format_time, plain, print_json
from jobboard.errors import JobNotFound
from jobboard.job import Job, Priority, TrashedJob

DEFAULT_TRASH_REASON = "trashed from the command line"
DEFAULT_CANCEL_REASON = "cancelled from the command line"


# -- output helpers ---------------------------------------------------------


def attempts_text(attempts: int, max_attempts: int | None) -> str:
    """``attempts`` or ``attempts/max_attempts``."""
    return str(attempts) if max_attempts is None else f"{attempts}/{max_attempts}"


async def job_record(board: JobBoard, job: Job) -> dict[str, Any]:
    """Every field of ``job`` plus its current state and owner."""
    record = asdict(job)
    record["priority"] = job.priority.name.lower()
    record["state"] = (await board.state(job)).value
    record["owner"] = await board.owner(job)
    return record


# -- commands ---------------------------------------------------------------


def post_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="what to do (a handler name)")
    parser.add_argument("--details", default=None, metavar="JSON",
                        help="job details, a JSON object; @PATH reads it from a file, - from stdin")
    parser.add_argument("--priority", type=_priority, default=Priority.NORMAL,
                        help="very_low, low, normal (default), high or very_high (or -2..2)")
    parser.add_argument("--max-attempts", type=int, default=None, metavar="N",
                        help="times the job may be handed out (default: the board's)")
    parser.add_argument("--after", nargs="+", action="extend", default=[], metavar="JOB_ID",
                        help="jobs that must be consumed first")
    parser.add_argument("--key", default=None, metavar="KEY",
                        help="idempotency key: while a job posted with it is on the board (or settled "
                             "within the board's key_retention), print that job's id and post nothing")
    parser.add_argument("--delay", type=float, default=None, metavar="SECONDS",
                        help="not claimable until SECONDS from now (listed meanwhile)")


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
        raise CommandError(f"{source} must be a JSON object, not {type(details).__name__}")
    return details


async def post(board: JobBoard, args: argparse.Namespace) -> int:
    """Post one job and print its id."""
    job = await board.post(
        args.name, parse_details(args.details), priority=args.priority,
        depends_on=args.after, max_attempts=args.max_attempts, key=args.key, delay=args.delay,
    )
    print(job.id)
    return 0


def list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unclaimed", action="store_true", help="only jobs in state unclaimed")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


async def list_jobs(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the jobs on the board, in board order."""
    records = [await job_record(board, job) async for job in board.iterjobs(only_unclaimed=args.unclaimed)]
    if args.json:
        print_json(records)
        return 0
    headers: tuple[str, ...] = ("id", "name", "priority", "state", "owner", "attempts", "last_error")
    rows: list[tuple[Any, ...]] = [
        (r["id"], r["name"], r["priority"], r["state"], r["owner"] or "-",
         attempts_text(r["attempts"], r["max_attempts"]), _error_cell(r["last_error"]))
        for r in records
    ]
    if any(r["progress"] for r in records):  # a column only when some running job reported progress
        headers = (*headers[:6], "progress", headers[6])
        rows = [(*row[:6], progress_text(r["progress"], 30), row[6]) for row, r in zip(rows, records, strict=True)]
    print(format_table(headers, rows))
    return 0


def progress_text(progress: Mapping[str, Any] | None, width: int = 200) -> str:
    """A job record's progress as ``42% note`` (``-`` if none)."""
    if not progress:
        return "-"
    text = f"{progress['fraction']:.0%} {' '.join(str(progress['note']).split())}".rstrip()
    return text if len(text) <= width else text[:width - 3] + "..."


def _error_cell(error: Mapping[str, Any] | None) -> str:
    """A job record's last error as a short table cell (``-`` if none)."""
    if not error:
        return "-"
    text = f"{error['type']}: {' '.join(str(error['message']).split())}"
    return text if len(text) <= 60 else text[:57] + "..."


def show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


async def find_job(board: JobBoard, job_id: str) -> tuple[Job, str | None]:
    """The job on the board or in the trash, with its trash reason (``None`` if not trashed).

    :raises JobNotFound: the job is in neither place.
    """
    try:
        return await board.get(job_id), None
    except JobNotFound:
        async for item in board.trashed():
            if item.job.id == job_id:
                return item.job, item.reason
        raise


async def show(board: JobBoard, args: argparse.Namespace) -> int:
    """Print every field of one job, its state and owner (and trash reason)."""
    job, reason = await find_job(board, args.id)
    record = await job_record(board, job)
    if reason is not None:
        record["trash_reason"] = reason
    if args.json:
        print_json(record)
        return 0
    record["created_at"] = format_time(job.created_at)
    record["not_before"] = format_time(job.not_before)
    record["details"] = json.dumps(plain(job.details), allow_nan=False)
    record["depends_on"] = ", ".join(job.depends_on) or "-"
    record["last_error"] = job.last_error.summary() if job.last_error else None
    record["progress"] = None if job.progress is None else (
        f"{progress_text(record['progress'])} (at {format_time(job.progress.at)})")
    if job.last_error is not None:
        record["last_error_at"] = format_time(job.last_error.at)
        record["last_traceback"] = "\n  " + job.last_error.traceback.rstrip().replace("\n", "\n  ")
    width = max(len(key) for key in record)
    for key, value in record.items():
        print(f"{key + ':':<{width + 1}} {'-' if value is None else value}")
    return 0


def trash_arguments(parser: argparse.ArgumentParser, default_reason: str) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--reason", default=default_reason, help="why (kept with the job)")


def trashing(verb: str) -> Callable[[JobBoard, argparse.Namespace], Awaitable[int]]:
    """``trash`` and ``cancel``: move a job to the trash without claiming it (no attempt is
    counted; waiting jobs too), revoking its claim (and stopping its handler) if it has one."""

    async def command(board: JobBoard, args: argparse.Namespace) -> int:
        running = await board.owner(args.id)
        await board.cancel(args.id, args.reason)
        revoked = f" (its claim by {running} revoked)" if running else ""
        print(f"{verb} {args.id}{revoked}: {args.reason}")
        return 0

    return command


async def list_trashed(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the trash, oldest first, with reasons."""
    items: list[TrashedJob] = [item async for item in board.trashed()]
    rows = [(i.job.id, i.job.name, format_time(i.trashed_at), first_line(i.reason)) for i in items]
    print(format_table(("id", "name", "trashed_at", "reason"), rows))
    return 0


