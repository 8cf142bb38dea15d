"""``jobboard``: a thin command-line front end to a board (``python -m jobboard``).

Every subcommand is one :class:`~jobboard.cli.command.Command` in :data:`COMMANDS`: its
arguments, and either an async action run on the opened board (``--board URL``, default
``$JOBBOARD_URL``) or a local runner that needs no board. Errors print one line
``jobboard: error: ...``; the exit statuses are in :data:`~jobboard.cli.command.EXIT_STATUSES`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from jobboard.cli import jobs
from jobboard.cli.command import (
    EXIT_NOT_MET,
    EXIT_STATUSES,
    EXIT_UNREACHABLE,
    PROG,
    BoardAction,
    Command,
    CommandError,
    no_arguments,
)
from jobboard.cli.dashboard import dashboard_arguments, serve
from jobboard.cli.options import URL_ENV, add_global_options, shared_options
from jobboard.cli.plan import plan_arguments, plan_command
from jobboard.cli.worker import check, check_arguments, run_worker, worker_arguments
from jobboard.errors import BackendNotFound, BackendUnavailable, JobBoardError
from jobboard.registry import open_board


def demo(args: argparse.Namespace) -> int:
    """Run the README's demo (imported lazily: it is not needed by other commands)."""
    from jobboard import demo as demo_module

    return demo_module.main()


COMMANDS: tuple[Command, ...] = (
    Command("post", "post a job and print its id", jobs.post_arguments, on_board=jobs.post),
    Command("list", "list the jobs on the board", jobs.list_arguments, on_board=jobs.list_jobs),
    Command("show", "show one job, its state and owner", jobs.show_arguments, on_board=jobs.show),
    Command("trash", "move a job to the trash (unclaimed, waiting or claimed)",
            functools.partial(jobs.trash_arguments, default_reason=jobs.DEFAULT_TRASH_REASON),
            on_board=jobs.trashing("trashed")),
    Command("cancel", "move a job to the trash, cancelling it if a worker runs it",
            functools.partial(jobs.trash_arguments, default_reason=jobs.DEFAULT_CANCEL_REASON),
            on_board=jobs.trashing("cancelled")),
    Command("trashed", "list the trash with reasons", no_arguments, on_board=jobs.list_trashed),
    Command("demo", "run a producer and three workers on memory://demo", no_arguments, local=demo),
    Command("worker", "run a worker with handlers from MODULE:NAME", worker_arguments, on_board=run_worker),
    Command("check", "exit 0 if a live worker is registered", check_arguments, on_board=check),
    Command("plan", "status, wait for, draw, cancel a plan; clean up interrupted ones", plan_arguments,
            on_board=plan_command),
    Command("dashboard", "serve a web dashboard of the board and its plans", dashboard_arguments, on_board=serve),
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
