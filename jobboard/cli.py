"""``jobboard``: a thin command-line front end to a board (``python -m jobboard``).

Every subcommand is one :class:`Command` in :data:`COMMANDS`: its arguments,
and either an async action run on the opened board (``--board URL``, default
``$JOBBOARD_URL``) or a local runner that needs no board. Errors print one line
``jobboard: error: ...``; the exit statuses are in :data:`EXIT_STATUSES`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

from jobboard.board import JobBoard
from jobboard.cli_options import URL_ENV, add_global_options, shared_options
from jobboard.cli_output import first_line, format_table, format_time, plain, print_json
from jobboard.cli_plan import plan_arguments, plan_command
from jobboard.cli_worker import CommandError, check, check_arguments, run_worker, worker_arguments
from jobboard.errors import BackendNotFound, BackendUnavailable, JobBoardError, JobNotFound
from jobboard.job import Job, Priority, TrashedJob
from jobboard.registry import open_board

PROG = "jobboard"
DEFAULT_TRASH_REASON = "trashed from the command line"
DEFAULT_CANCEL_REASON = "cancelled from the command line"

EXIT_OK, EXIT_NOT_MET, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_STATUSES = """exit statuses:
  0  ok
  1  the condition is not met (e.g. check: no live worker) or the command failed
  2  usage error (bad option or argument, no board given)
  3  the board is unreachable (retrying may help) or no installed backend serves its URL"""

BoardAction = Callable[[JobBoard, argparse.Namespace], Awaitable[int]]
"""Runs a command on the opened board; returns the exit status."""
LocalAction = Callable[[argparse.Namespace], int]
"""Runs a command that needs no board; returns the exit status."""


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its arguments and what runs it (exactly one of the actions)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    on_board: BoardAction | None = None
    local: LocalAction | None = None


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


def _post_arguments(parser: argparse.ArgumentParser) -> None:
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
        depends_on=args.after, max_attempts=args.max_attempts, key=args.key,
    )
    print(job.id)
    return 0


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unclaimed", action="store_true", help="only jobs in state unclaimed")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


async def list_jobs(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the jobs on the board, in board order."""
    records = [await job_record(board, job) async for job in board.iterjobs(only_unclaimed=args.unclaimed)]
    if args.json:
        print_json(records)
        return 0
    headers = ("id", "name", "priority", "state", "owner", "attempts", "last_error")
    rows = [
        (r["id"], r["name"], r["priority"], r["state"], r["owner"] or "-",
         attempts_text(r["attempts"], r["max_attempts"]), _error_cell(r["last_error"]))
        for r in records
    ]
    print(format_table(headers, rows))
    return 0


def _error_cell(error: Mapping[str, Any] | None) -> str:
    """A job record's last error as a short table cell (``-`` if none)."""
    if not error:
        return "-"
    text = f"{error['type']}: {' '.join(str(error['message']).split())}"
    return text if len(text) <= 60 else text[:57] + "..."


def _show_arguments(parser: argparse.ArgumentParser) -> None:
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
    if job.last_error is not None:
        record["last_error_at"] = format_time(job.last_error.at)
        record["last_traceback"] = "\n  " + job.last_error.traceback.rstrip().replace("\n", "\n  ")
    width = max(len(key) for key in record)
    for key, value in record.items():
        print(f"{key + ':':<{width + 1}} {'-' if value is None else value}")
    return 0


def _trash_arguments(parser: argparse.ArgumentParser, default_reason: str) -> None:
    parser.add_argument("id", help="the job's id")
    parser.add_argument("--reason", default=default_reason, help="why (kept with the job)")


def _trashing(verb: str) -> Callable[[JobBoard, argparse.Namespace], Awaitable[int]]:
    """``trash`` and ``cancel``: move a job to the trash without claiming it (no attempt is
    counted; waiting jobs too), revoking its claim (and stopping its handler) if it has one."""

    async def command(board: JobBoard, args: argparse.Namespace) -> int:
        running = await board.owner(args.id)
        await board.cancel(args.id, args.reason)
        revoked = f" (its claim by {running} revoked)" if running else ""
        print(f"{verb} {args.id}{revoked}: {args.reason}")
        return 0

    return command


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without arguments."""


async def list_trashed(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the trash, oldest first, with reasons."""
    items: list[TrashedJob] = [item async for item in board.trashed()]
    rows = [(i.job.id, i.job.name, format_time(i.trashed_at), first_line(i.reason)) for i in items]
    print(format_table(("id", "name", "trashed_at", "reason"), rows))
    return 0


def demo(args: argparse.Namespace) -> int:
    """Run the README's demo (imported lazily: it is not needed by other commands)."""
    from jobboard import demo as demo_module

    return demo_module.main()


COMMANDS: tuple[Command, ...] = (
    Command("post", "post a job and print its id", _post_arguments, on_board=post),
    Command("list", "list the jobs on the board", _list_arguments, on_board=list_jobs),
    Command("show", "show one job, its state and owner", _show_arguments, on_board=show),
    Command("trash", "move a job to the trash (unclaimed, waiting or claimed)",
            functools.partial(_trash_arguments, default_reason=DEFAULT_TRASH_REASON), on_board=_trashing("trashed")),
    Command("cancel", "move a job to the trash, cancelling it if a worker runs it",
            functools.partial(_trash_arguments, default_reason=DEFAULT_CANCEL_REASON),
            on_board=_trashing("cancelled")),
    Command("trashed", "list the trash with reasons", _no_arguments, on_board=list_trashed),
    Command("demo", "run a producer and three workers on memory://demo", _no_arguments, local=demo),
    Command("worker", "run a worker with handlers from MODULE:NAME", worker_arguments, on_board=run_worker),
    Command("check", "exit 0 if a live worker is registered", check_arguments, on_board=check),
    Command("plan", "status, wait for, draw, cancel a plan; clean up interrupted ones", plan_arguments,
            on_board=plan_command),
)


# -- entry point ------------------------------------------------------------


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser: global options plus one subparser per command."""
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect and feed a job board.", epilog=EXIT_STATUSES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_global_options(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    shared = shared_options()
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.help, parents=[shared])
        command.configure(sub)
        sub.set_defaults(command=command)
    return parser


def _version() -> str:
    from jobboard import __version__

    return __version__


QUIET_LOGGERS = ("aiozk",)
"""Client libraries whose connection chatter is hidden unless ``--verbose``."""


def configure_logging(verbose: bool) -> None:
    """Log to stderr unless the host program already configured logging."""
    if logging.getLogger().handlers:
        return
    logging.basicConfig(format=f"{PROG}: %(levelname)s: %(message)s",
                        level=logging.DEBUG if verbose else logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.CRITICAL)


def board_url(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """``--board`` or ``$JOBBOARD_URL``; a usage error (exit 2) when neither is set."""
    url: str | None = getattr(args, "url", None) or args.board or os.environ.get(URL_ENV)
    if not url:
        parser.error(f"no board given: pass --board URL or set {URL_ENV}")
    return url


async def run_on_board(url: str, action: BoardAction, args: argparse.Namespace) -> int:
    """Open the board, run ``action`` on it, close it."""
    async with open_board(url) as board:
        return await action(board, args)


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the parsed command."""
    command: Command = args.command
    if command.local is not None:
        return command.local(args)
    assert command.on_board is not None, f"command {command.name} has no action"
    return anyio.run(run_on_board, board_url(parser, args), command.on_board, args)


def one_line(error: BaseException) -> str:
    """An error message squeezed onto one line."""
    return " ".join(str(error).split()) or type(error).__name__


def exit_status(code: object) -> int:
    """The integer status of a ``SystemExit`` code (``None`` is success)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (see :data:`EXIT_STATUSES`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        prepare = getattr(args, "prepare", None)  # e.g. the worker: signals and logging before connecting
        with prepare(args) if prepare is not None else contextlib.nullcontext():
            configure_logging(args.verbose)
            return dispatch(parser, args)
    except SystemExit as exit_:  # argparse: --help, --version, usage errors
        return exit_status(exit_.code)
    except (BackendUnavailable, BackendNotFound) as error:
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (JobBoardError, CommandError) as error:
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_NOT_MET
    except KeyboardInterrupt:
        return 130
