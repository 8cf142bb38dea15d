"""``jobboard worker`` and ``jobboard check``: run a worker, check that workers are alive."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, cast

from jobboard.board import JobBoard
from jobboard.handlers import Handler
from jobboard.worker import Worker, WorkerConfig, default_owner


class CommandError(Exception):
    """A command's input is unusable (e.g. ``--details`` is not a JSON object)."""


def load_handler(spec: str) -> Handler:
    """Import ``module:attribute`` (a :class:`~jobboard.handlers.Handlers` or an async callable).

    :raises CommandError: the module or attribute is missing, or it is not callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"--handlers takes module:attribute, not {spec!r}")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise CommandError(f"cannot load handlers {spec!r}: {error}") from error
    if not callable(found):
        raise CommandError(f"{spec!r} is not callable (a Handlers registry or an async handler)")
    return cast(Handler, found)


def worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", help="board URL (or --board / $JOBBOARD_URL)")
    parser.add_argument("--handlers", required=True, metavar="MODULE:NAME",
                        help="a Handlers registry (or one async handler) to import")
    parser.add_argument("--concurrency", type=int, default=1, help="jobs in flight (default 1)")
    parser.add_argument("--owner", default=None, help="worker name (default host-pid-random)")
    parser.add_argument("--lease", type=float, default=None, help="claim lease in seconds")
    parser.add_argument("--grace-period", type=float, default=30.0, help="seconds to finish jobs on SIGTERM")
    parser.add_argument("--max-attempts", type=int, default=None,
                        help="trash a failing job after this many attempts (when it has no limit of its own)")


async def run_worker(board: JobBoard, args: argparse.Namespace) -> int:
    """Run a worker until SIGTERM/SIGINT (a second signal stops at once)."""
    handler = load_handler(args.handlers)
    try:
        config = WorkerConfig(owner=args.owner or default_owner(), concurrency=args.concurrency,
                              lease=args.lease, grace_period=args.grace_period,
                              max_attempts=args.max_attempts)
    except ValueError as error:
        raise CommandError(str(error)) from error
    worker = Worker(board, handler, config)
    print(f"worker {worker.owner} on {board.url} (concurrency {config.concurrency})", flush=True)
    stats = await worker.run(handle_signals=True)
    print(f"worker {worker.owner} stopped: {stats}", flush=True)
    return 0


def check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", help="board URL (or --board / $JOBBOARD_URL)")
    parser.add_argument("--name", default=None, help="require this worker (entity) to be alive")


async def check(board: JobBoard, args: argparse.Namespace) -> int:
    """Exit 0 if a live worker is registered (or the named one is), else 1; print what was seen."""
    entities = await board.entities()
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
