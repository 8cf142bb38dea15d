"""One job, wherever it is: ``show`` (on the board, in the trash, or consumed), ``result`` and ``wait``.

A board keeps nothing of a consumed job but its result when it was posted with ``keep_result``, so a
consumed job shows as ``complete`` (with that result) — and so does an id never posted on the board,
unless the backend can tell that no job was ever posted under the id (not the form of its ids, or past
the last id it gave): that is an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.cli.command import EXIT_NOT_MET, EXIT_OK, PROG, CommandError
from jobboard.cli.jobs import job_record, progress_text
from jobboard.cli.output import format_time, plain, print_json
from jobboard.errors import JobNotFound
from jobboard.job import Job, JobState

CONSUMED_NOTE = ("not on the board nor in the trash: consumed (a board keeps only a kept result of a "
                 "consumed job; an id never posted here looks the same)")
ON_BOARD = (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING)


@dataclass(frozen=True, slots=True)
class Found:
    """What the board knows of one job id."""

    job_id: str
    state: JobState
    job: Job | None = None
    """The job as last seen: on the board or in the trash (``None`` once consumed)."""
    owner: str | None = None
    reason: str | None = None
    """Why it was trashed."""
    trashed_at: float | None = None
    result: Any = None
    """The kept result of a consumed job (``None`` if it was posted without ``keep_result``)."""

    @property
    def finished(self) -> bool:
        return self.state not in ON_BOARD

    def record(self) -> dict[str, Any]:
        """Every known field (JSON data; ``last_error`` in full)."""
        if self.job is None:
            return {"id": self.job_id, "state": self.state.value, "finished": True, "result": self.result,
                    "note": CONSUMED_NOTE}
        record = {**job_record(self.job, self.state, self.owner), "finished": self.finished}
        if self.state is JobState.TRASHED:
            record.update(trash_reason=self.reason, trashed_at=self.trashed_at)
        return record


async def find(board: JobBoard, job_id: str) -> Found:
    """Look for the job on the board, then in the trash; otherwise it was consumed (its kept result).

    :raises CommandError: the id is not of the form the board's ids take, or the board has not
        given it yet: never posted here.
    """
    if not board.could_be_job_id(job_id):
        raise CommandError(f"no job {job_id!r} was ever posted on this board: its ids do not look like that")
    try:
        job = await board.get(job_id)
    except JobNotFound:
        pass
    else:
        return Found(job_id, await board.state(job), job, await board.owner(job))
    async for item in board.trashed():
        if item.job.id == job_id:
            return Found(job_id, JobState.TRASHED, item.job, reason=item.reason, trashed_at=item.trashed_at)
    with anyio.fail_after(30):  # returns at once: the job left the board
        outcome = await board.wait_for_completion(job_id)
    if outcome.state is JobState.TRASHED:  # trashed since the trash was read
        return Found(job_id, JobState.TRASHED, reason=outcome.reason)
    if outcome.result is None and await board.never_posted(job_id):
        raise CommandError(f"no job {job_id!r} was ever posted on this board: it has not given that id yet")
    return Found(job_id, JobState.COMPLETE, result=outcome.result)


def print_fields(fields: dict[str, Any]) -> None:
    """``key: value`` lines, the values aligned."""
    width = max(len(key) for key in fields)
    for key, value in fields.items():
        print(f"{key + ':':<{width + 1}} {'-' if value is None else value}")


def as_json(value: Any) -> str:
    return json.dumps(plain(value), allow_nan=False)


def text_fields(found: Found) -> dict[str, Any]:
    """What ``show`` prints for a job: every field, times in UTC, the last error with its traceback."""
    if found.job is None:
        return {"id": found.job_id, "state": found.state.value,
                "result": "-" if found.result is None else as_json(found.result), "note": CONSUMED_NOTE}
    job = found.job
    fields = found.record()
    del fields["finished"]
    fields.update(created_at=format_time(job.created_at), not_before=format_time(job.not_before),
                  details=as_json(job.details), depends_on=", ".join(job.depends_on) or "-",
                  last_error=job.last_error.summary() if job.last_error else None)
    if job.progress is not None:
        fields["progress"] = f"{progress_text(fields['progress'])} (at {format_time(job.progress.at)})"
    if found.trashed_at is not None:
        fields["trashed_at"] = format_time(found.trashed_at)
    if job.last_error is not None:
        fields["last_error_at"] = format_time(job.last_error.at)
        fields["last_traceback"] = "\n  " + job.last_error.traceback.rstrip().replace("\n", "\n  ")
    return fields


def show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")


async def show(board: JobBoard, args: argparse.Namespace) -> int:
    """Print every field of one job and its state: owner when claimed, reason and last error when
    trashed, kept result when consumed."""
    found = await find(board, args.id)
    if args.json:
        print_json(found.record())
    else:
        print_fields(text_fields(found))
    return EXIT_OK


def outcome_fields(found: Found) -> dict[str, Any]:
    """What ``result`` and ``wait`` print for a finished job."""
    fields: dict[str, Any] = {"id": found.job_id, "outcome": found.state.value}
    if found.state is JobState.COMPLETE:
        fields["result"] = "-" if found.result is None else as_json(found.result)
    else:
        fields["reason"] = " ".join((found.reason or "").split()) or None
        last_error = found.job.last_error if found.job is not None else None
        fields["last_error"] = last_error.summary() if last_error else None
    return fields


def report(found: Found, as_json_output: bool) -> int:
    """Print a finished job's outcome; exit 0 if it was consumed, 1 if it was trashed."""
    if as_json_output:
        print_json(found.record())
    else:
        print_fields(outcome_fields(found))
    return EXIT_OK if found.state is JobState.COMPLETE else EXIT_NOT_MET


def not_finished(found: Found, as_json_output: bool, why: str) -> int:
    """A job still on the board: its state on stdout as JSON, or one line on stderr; exit 1."""
    if as_json_output:
        print_json(found.record())
    else:
        owner = f" by {found.owner}" if found.owner else ""
        print(f"{PROG}: {found.job_id} {why}: {found.state.value}{owner}", file=sys.stderr)
    return EXIT_NOT_MET


def result_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")


async def result(board: JobBoard, args: argparse.Namespace) -> int:
    """How a finished job ended and its kept result; exit 1 if it is not finished (or was trashed)."""
    found = await find(board, args.id)
    if not found.finished:
        return not_finished(found, args.json, "is not finished")
    return report(found, args.json)


def wait_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="give up after this long (exit 1); default: wait as long as it takes")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds >= 0: {text!r}")
    return value


async def wait(board: JobBoard, args: argparse.Namespace) -> int:
    """Block until the job is consumed or trashed (event-driven), then print how it ended like ``result``.

    Exit 0 if consumed, 1 if trashed or still not finished after ``--timeout``.
    """
    with anyio.move_on_after(args.timeout if args.timeout is not None else float("inf")):
        await board.wait_for_completion(args.id)
    found = await find(board, args.id)
    if not found.finished:
        return not_finished(found, args.json, f"is not finished after {args.timeout:g} s")
    return report(found, args.json)
