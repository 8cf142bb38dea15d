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

from jobboard.board.registry import installed_schemes, open_board
from jobboard.cli import examples, jobs, jobs_results, limits, stats, top, trash
from jobboard.cli.command import (
    EXIT_NOT_MET,
    EXIT_STATUSES,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    PROG,
    BoardAction,
    Command,
    CommandError,
    UsageError,
    examples_epilog,
    negative_values_attached,
)
from jobboard.cli.dashboard import dashboard_arguments, serve
from jobboard.cli.metrics import metrics_arguments, serve_board_metrics
from jobboard.cli.options import (
    URL_ENV,
    add_global_options,
    as_given,
    default_board_url,
    for_command,
    shared_options,
    shown,
)
from jobboard.cli.plan import plan_arguments, plan_command
from jobboard.cli.schedule import schedule_arguments, schedule_command
from jobboard.cli.worker import check, check_arguments, run_worker, worker_arguments
from jobboard.errors import BackendNotFound, BackendUnavailable, InvalidURL, JobBoardError


def demo(args: argparse.Namespace) -> int:
    """Run the README's demo (imported lazily: it is not needed by other commands).

    :raises UsageError: ``--board`` given: the demo runs on its own board.
    """
    if args.board:
        raise UsageError("the demo runs on its own board (a sqlite:// file in a temporary directory, or "
                         "memory://demo with --in-process): --board is not used (to try another board, post "
                         "with `jobboard post` and run `jobboard worker`)")
    from jobboard import demo as demo_module

    return demo_module.main_in_process() if getattr(args, "in_process", False) else demo_module.main()


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--in-process", action="store_true",
                        help="run the three workers in this process on a memory:// board")


COMMANDS: tuple[Command, ...] = (
    Command("post", "post a job and print its id", jobs.post_arguments, on_board=jobs.post,
            example=examples.POST),
    Command("list", "list the jobs on the board", jobs.list_arguments, on_board=jobs.list_jobs,
            example=examples.LIST),
    Command("show", "show one job: on the board, in the trash, or consumed", jobs_results.show_arguments,
            on_board=jobs_results.show, example=examples.SHOW),
    Command("result", "how a finished job ended, and its kept result", jobs_results.result_arguments,
            on_board=jobs_results.result, example=examples.RESULT),
    Command("wait", "wait until a job is consumed or trashed", jobs_results.wait_arguments,
            on_board=jobs_results.wait, example=examples.WAIT),
    Command("trash", "move jobs to the trash (unclaimed, waiting or claimed)",
            functools.partial(jobs.trash_arguments, default_reason=jobs.DEFAULT_TRASH_REASON),
            on_board=jobs.trashing("trashed"), example=examples.TRASH),
    Command("cancel", "move jobs to the trash, stopping the handler of a running one",
            functools.partial(jobs.trash_arguments, default_reason=jobs.DEFAULT_CANCEL_REASON),
            on_board=jobs.trashing("cancelled"), example=examples.CANCEL),
    Command("trashed", "list the trash with reasons", jobs.trashed_arguments, on_board=jobs.list_trashed,
            example=examples.TRASHED),
    Command("purge", "remove trash entries older than a duration", trash.purge_arguments, on_board=trash.purge),
    Command("requeue", "put trashed jobs back on the board", trash.requeue_arguments, on_board=trash.requeue),
    Command("stats", "the board's figures: jobs by state, name, priority; trash; live workers",
            stats.stats_arguments, on_board=stats.stats, example=examples.STATS),
    Command("limit", "list the limits per group; set (--concurrency, --sequence, --rate) or --clear one",
            limits.limit_arguments, on_board=limits.limit, example=examples.LIMIT),
    Command("pause", "stop new claims of a job name (or of every job) on every board", limits.pause_arguments,
            on_board=limits.pause, example=examples.PAUSE),
    Command("resume", "lift a pause of a job name (or the whole board's)", limits.pause_arguments,
            on_board=limits.resume, example=examples.RESUME),
    Command("top", "a live view of the board in the terminal, refreshed from its events", top.top_arguments,
            on_board=top.top, example=examples.TOP),
    Command("demo", "run a plan on three worker processes sharing a sqlite:// file board", demo_arguments, local=demo,
            example=examples.DEMO),
    Command("worker", "run a worker with handlers from MODULE:NAME", worker_arguments, on_board=run_worker,
            example=examples.WORKER),
    Command("check", "exit 0 if a live worker is registered", check_arguments, on_board=check,
            example=examples.CHECK),
    Command("plan", "list, status, wait for, draw, cancel plans; clean up interrupted ones", plan_arguments,
            on_board=plan_command, example=examples.PLAN),
    Command("metrics", "serve the board's gauges for Prometheus", metrics_arguments, on_board=serve_board_metrics),
    Command("schedule", "add, list, remove the periodic jobs stored on the board", schedule_arguments,
            on_board=schedule_command),
    Command("dashboard", "serve a web dashboard of the board and its plans", dashboard_arguments, on_board=serve,
            example=examples.DASHBOARD),
)


# -- entry point ------------------------------------------------------------


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser: global options plus one subparser per command."""
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect and feed a job board.", epilog=f"{EXIT_STATUSES}\n\n{examples_epilog(examples.MAIN)}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_global_options(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    shared = shared_options()
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help, parents=[shared],
                                    epilog=examples_epilog(command.example),
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
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
    """``--board`` or ``$JOBBOARD_URL``, else the default file board (said on stderr); a usage error (exit 2)
    when neither is set and the ``sqlite://`` backend is not installed."""
    url: str | None = getattr(args, "url", None) or args.board or os.environ.get(URL_ENV)
    if url:
        return url
    if "sqlite" not in installed_schemes():
        parser.error(f"no board given: pass --board URL or set {URL_ENV}")
    try:
        url = default_board_url()
    except OSError as error:
        parser.error(f"no board given, and the default board's directory cannot be made ({error}): "
                     f"pass --board URL or set {URL_ENV}")
    print(f"{PROG}: using the default board {url} (choose another with --board URL or {URL_ENV})", file=sys.stderr)
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
    given = board_url(parser, args)
    opened = for_command(command.name, given)
    args.as_given = functools.partial(as_given, given=given, opened=opened)  # messages show the URL given
    return anyio.run(run_on_board, opened, command.on_board, args)


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
    args = argparse.Namespace()
    try:
        args = parser.parse_args(negative_values_attached(parser, sys.argv[1:] if argv is None else argv))
        prepare = getattr(args, "prepare", None)  # e.g. the worker: signals and logging before connecting
        with prepare(args) if prepare is not None else contextlib.nullcontext():
            configure_logging(args.verbose)
            return dispatch(parser, args)
    except SystemExit as exit_:  # argparse: --help, --version, usage errors
        return exit_status(exit_.code)
    except (BackendUnavailable, BackendNotFound) as error:
        print(f"{PROG}: error: {shown(args, one_line(error))}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (UsageError, InvalidURL) as error:  # an option's value that argparse cannot judge alone
        print(f"{PROG}: error: {shown(args, one_line(error))}", file=sys.stderr)
        return EXIT_USAGE
    except (JobBoardError, CommandError) as error:
        print(f"{PROG}: error: {shown(args, one_line(error))}", file=sys.stderr)
        return EXIT_NOT_MET
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`jobboard top | head`): it had enough
        quiet_stdout()
        return 0


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit raises no second ``BrokenPipeError``."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
