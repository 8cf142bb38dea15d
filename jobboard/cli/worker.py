"""``jobboard worker`` and ``jobboard check``: run a worker, check that workers are alive."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, cast

from jobboard.board.contract import JobBoard
from jobboard.cli.command import CommandError, UsageError, seconds, whole_number
from jobboard.cli.observe import WorkerExtras, worker_options
from jobboard.cli.output import print_json
from jobboard.errors import Unsupported
from jobboard.observe import logs
from jobboard.worker.conductor import Worker, WorkerConfig, default_owner
from jobboard.worker.early_signals import catch_early_signals
from jobboard.worker.handlers import Handler
from jobboard.worker.retry import DEFAULT_MAX_ATTEMPTS, RetryPolicy


def load_handler(spec: str) -> Handler:
    """Import ``module:attribute`` (a :class:`~jobboard.worker.handlers.Handlers` or an async callable).

    The current directory is searched first, as ``python -m`` does (a console
    script would not find ``app.jobs`` next to the user otherwise).

    :raises UsageError: the spec is not ``module:attribute``.
    :raises CommandError: the module or attribute is missing, the module does
        not import (its error on one line), or it is not callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--handlers takes module:attribute, not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise CommandError(f"cannot load handlers {spec!r}: {error}") from error
    except SyntaxError as error:
        where = f"{error.filename}, line {error.lineno}" if error.filename else "its source"
        raise CommandError(f"cannot load handlers {spec!r}: syntax error in {where}: {error.msg}") from error
    except Exception as error:
        raise CommandError(f"cannot load handlers {spec!r}: importing it raised "
                           f"{type(error).__name__}: {error}") from error
    if not callable(found):
        raise CommandError(f"{spec!r} is not callable (a Handlers registry or an async handler)")
    return cast(Handler, found)


def _level(text: str) -> int:
    try:
        return logs.parse_level(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", help="board URL (or --board / $JOBBOARD_URL)")
    parser.add_argument("--handlers", required=True, metavar="MODULE:NAME",
                        help="a Handlers registry (or one handler) to import; the current directory is searched")
    parser.add_argument("--concurrency", type=int, default=1, help="jobs in flight (default 1)")
    parser.add_argument("--prefetch", type=int, default=0, metavar="N",
                        help="hold up to N more jobs claimed ahead (with a slot's job in one call on redis://; a claim "
                             "each elsewhere); given back at the stop (default 0). Fairness cost: they wait for "
                             "this worker")
    parser.add_argument("--owner", default=None, help="worker name (default host-pid-random)")
    parser.add_argument("--lease", type=float, default=None, help="claim lease in seconds")
    parser.add_argument("--grace-period", type=seconds, default=30.0, help="seconds to finish jobs on SIGTERM")
    parser.add_argument("--max-attempts", type=whole_number, default=DEFAULT_MAX_ATTEMPTS, metavar="N",
                        help=f"trash a failing job after N attempts, when it has no limit of its own "
                             f"(default {DEFAULT_MAX_ATTEMPTS}; 0: no limit)")
    parser.add_argument("--retry-delay", type=float, default=1.0, metavar="SECONDS",
                        help="back-off after the first failure, doubled each time up to 300 s (default 1)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="cancel a handler running longer (a handler's or job's own timeout wins)")
    parser.add_argument("--idle-backoff-max", type=float, default=10.0, metavar="SECONDS",
                        help="an idle worker re-checks the board at least this often (default 10)")
    parser.add_argument("--burst", action="store_true", help="exit 0 once nothing claimable is left")
    parser.add_argument("--schedule", action="store_true",
                        help="also post the board's periodic jobs (see jobboard schedule; safe on many workers)")
    parser.add_argument("--log-level", type=_level, default=None, metavar="LEVEL",
                        help="debug, info (default), warning or error; debug shows the backend client's chatter")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="text lines (default) or one JSON object per line")
    worker_options(parser)
    parser.set_defaults(prepare=prepare_worker)


@contextlib.contextmanager
def prepare_worker(args: argparse.Namespace) -> Iterator[None]:
    """Around the whole command: a SIGTERM from now on is a clean stop; logging as asked.

    Logging and SIGINT are restored afterwards (for ``main()`` called in-process);
    SIGTERM stays caught, so that one arriving as the process exits does no harm.
    """
    root = logging.getLogger()
    handlers, level_before, sigint = list(root.handlers), root.level, signal.getsignal(signal.SIGINT)
    catch_early_signals()
    level = args.log_level if args.log_level is not None else (logging.DEBUG if args.verbose else logging.INFO)
    logs.configure(level, args.log_format)
    try:
        yield
    finally:
        logs.restore(handlers, level_before)
        signal.signal(signal.SIGINT, sigint)


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """:raises CommandError: an option is out of range."""
    try:
        retry = RetryPolicy(max_attempts=args.max_attempts or None, initial_delay=args.retry_delay)
        return WorkerConfig(owner=args.owner or default_owner(), concurrency=args.concurrency, prefetch=args.prefetch,
                            lease=args.lease, grace_period=args.grace_period, retry=retry,
                            timeout=args.timeout, idle_backoff_max=args.idle_backoff_max, burst=args.burst,
                            scheduler=args.schedule)
    except ValueError as error:
        raise UsageError(str(error)) from error


async def run_worker(board: JobBoard, args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM/SIGINT (a second signal stops at once), or ``--burst`` is done."""
    handler = load_handler(args.handlers)
    config = worker_config(args)
    extras = WorkerExtras(args)
    try:
        worker = Worker(await extras.board(board), handler, config, middleware=extras.middleware)
    except Unsupported as error:  # e.g. --prefetch on a board that cannot give a job back uncounted
        raise UsageError(str(error)) from error
    plain = args.log_format == "text"  # with json logs, stdout holds only JSON: the worker logs both lines itself
    if plain:
        print(f"worker {worker.owner} on {board.url} (concurrency {config.concurrency})", flush=True)
    stats = await extras.run(worker)
    if plain:
        print(f"worker {worker.owner} stopped: {stats.summary()}", flush=True)
    return 0


def check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", help="board URL (or --board / $JOBBOARD_URL)")
    parser.add_argument("--name", default=None, help="require this worker (entity) to be alive")
    parser.add_argument("--json", action="store_true", help="print the live workers as a JSON list")


async def check(board: JobBoard, args: argparse.Namespace) -> int:
    """Exit 0 if a live worker is registered (or the named one is), else 1; print what was seen."""
    entities = await board.entities()
    if args.json:
        print_json([{"name": entity.name, "metadata": dict(entity.metadata)} for entity in entities])
    else:
        for entity in entities:
            details = ", ".join(f"{key}={value}" for key, value in sorted(entity.metadata.items()))
            print(f"{entity.name}  {details}")
    if args.name is not None:
        alive = any(entity.name == args.name for entity in entities)
        print(f"{args.name}: {'alive' if alive else 'not registered'}", file=sys.stdout if alive else sys.stderr)
        return 0 if alive else 1
    if not entities:
        print("no live workers registered", file=sys.stderr)
    return 0 if entities else 1
