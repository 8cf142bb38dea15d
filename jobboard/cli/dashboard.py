"""``jobboard dashboard URL``: serve the web dashboard of a board (extra ``jobboard[dashboard]``).

Read-only unless ``--allow-actions``, which needs a token (``--token`` or
``$JOBBOARD_DASHBOARD_TOKEN``); binds 127.0.0.1 unless ``--host`` says otherwise. ``--demo`` runs
the demo's plan again and again on the same (in-process) board, to watch a plan run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.cli.command import CommandError, UsageError, port_number

TOKEN_ENV = "JOBBOARD_DASHBOARD_TOKEN"
DEMO_URL = "memory://demo"


def dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", metavar="URL", help="the board (default: --board or $JOBBOARD_URL)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=port_number, default=8080, help="port to bind (default 8080)")
    parser.add_argument("--allow-actions", action="store_true",
                        help="allow cancel (and requeue / purge when the board has them) with the token")
    parser.add_argument("--token", help=f"the token actions need (default ${TOKEN_ENV})")
    parser.add_argument("--demo", action="store_true",
                        help=f"also run the demo's plan on the board, again and again (use {DEMO_URL})")
    parser.add_argument("--demo-pace", type=float, default=0.5, metavar="SECONDS",
                        help="with --demo: extra seconds each task takes (default 0.5)")


def _options(args: argparse.Namespace) -> Any:
    from jobboard.dashboard.model import Options

    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.allow_actions and not token:
        raise UsageError(f"--allow-actions needs a token: --token T or ${TOKEN_ENV}")
    if token and len(token) < 8:
        raise UsageError("the token is too short (8 characters or more)")
    return Options(allow_actions=args.allow_actions, token=token if args.allow_actions else None)


def listen(host: str, port: int) -> socket.socket:
    """The dashboard's listening socket, bound before anything is printed.

    :raises CommandError: the address cannot be bound (in use, not an address of this machine).
    """
    try:
        return socket.create_server((host, port))
    except OSError as error:
        raise CommandError(f"cannot serve the dashboard on {host}:{port}: "
                           f"{(error.strerror or str(error)).split(' (while')[0]}") from None


async def serve(board: JobBoard, args: argparse.Namespace) -> int:
    """Serve the dashboard until SIGTERM or SIGINT (Ctrl-C): a graceful stop, exit 0; a second signal
    ends the requests still open at once (as uvicorn does, but it also re-raised the signal: exit -15)."""
    try:
        import uvicorn

        from jobboard.dashboard.app import create_app, serve_with
    except ImportError as error:
        raise CommandError(f"the dashboard needs its extra: pip install 'jobboard[dashboard]' ({error})") from None
    options = _options(args)
    app = create_app(board, options, host=args.host)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, lifespan="on")
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # ours below
    serve_with(app, server)
    listener = listen(args.host, args.port)
    port = listener.getsockname()[1]
    mode = "actions allowed with the token" if options.allow_actions else "read-only"
    print(f"dashboard of {board.url} on http://{args.host}:{port}/ ({mode}); Ctrl-C stops it", flush=True)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as group:
            group.start_soon(stop_on_signals, server, signals)
            if args.demo:
                group.start_soon(run_demo_plans, board, args.demo_pace)
            await server.serve(sockets=[listener])
            group.cancel_scope.cancel()
    return 0 if server.started else 1


async def stop_on_signals(server: Any, signals: AsyncIterator[int]) -> None:
    """Stop ``server`` gracefully at the first signal, at once at the second."""
    async for _ in signals:
        server.force_exit = server.should_exit
        server.should_exit = True


async def run_demo_plans(board: JobBoard, pace: float) -> None:
    """Post the demo's plan and run it with three paced workers, again and again."""
    from jobboard import demo
    from jobboard.plans.posting import post_plan
    from jobboard.worker.conductor import Worker, WorkerConfig
    from jobboard.worker.handlers import JobContext

    async def paced(ctx: JobContext, call_next: Any) -> Any:
        await anyio.sleep(pace)
        return await call_next()

    while True:
        handle = await post_plan(board, demo.build_plan())
        print(f"demo: plan {handle.plan_id} posted", file=sys.stderr, flush=True)
        workers = [Worker(board, demo.handlers, WorkerConfig(owner=f"demo-worker-{n}", concurrency=2),
                          middleware=[paced]) for n in (1, 2, 3)]
        outcome = await handle.run_on(workers)
        print(f"demo: plan {handle.plan_id} {outcome.state}", file=sys.stderr, flush=True)
        demo._flaky_failed.clear()
        await anyio.sleep(10 * pace)
