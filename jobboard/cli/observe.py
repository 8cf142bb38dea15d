"""Metrics and traces for ``jobboard worker`` (``--metrics-port``, ``--trace``) and ``jobboard metrics``.

The optional packages are imported only when an option asks for them; a missing
one is a one-line error naming the extra to install.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.cli.command import CommandError, port_number
from jobboard.worker.handlers import Middleware

if TYPE_CHECKING:
    from jobboard.worker.conductor import Worker
    from jobboard.worker.stats import WorkerStats

DEFAULT_HOST = "127.0.0.1"


def optional(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (a jobboard module needing an extra).

    :raises CommandError: naming the extra to install when its package is missing.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise CommandError(f"{what} needs {error.name or 'a missing package'}: "
                           f"pip install 'jobboard[{extra}]'") from error


def worker_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics and traces")
    group.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (jobboard[metrics]; 0: a free "
                            "port, printed)")
    group.add_argument("--metrics-host", default=DEFAULT_HOST, metavar="HOST",
                       help=f"address to serve metrics on (default {DEFAULT_HOST})")
    group.add_argument("--trace", action="store_true",
                       help="OpenTelemetry spans for every job, claim and settle (jobboard[otel]; set up the SDK, "
                            "e.g. with opentelemetry-instrument)")


async def bind(host: str, port: int) -> Any:
    """A listener for ``jobboard.observe.metrics.serve_metrics``; prints the URL it serves.

    :raises CommandError: the address cannot be bound.
    """
    metrics = optional("jobboard.observe.metrics", "metrics", "serving metrics")
    try:
        listener = await metrics.bind_metrics(host, port)
    except OSError as error:
        raise CommandError(f"cannot serve metrics on {host}:{port}: {error.strerror or error}") from error
    print(f"metrics: http://{host}:{metrics.bound_port(listener)}/metrics", flush=True)
    return listener


class WorkerExtras:
    """What ``--metrics-port`` and ``--trace`` add to a worker: middleware, a board wrapper, a server."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.host, self.port, self.trace = args.metrics_host, args.metrics_port, args.trace
        self.metrics: Any = None
        self.middleware: list[Middleware] = []
        if self.port is not None:
            self.metrics = optional("jobboard.observe.metrics", "metrics", "--metrics-port").WorkerMetrics()
            self.middleware.append(self.metrics.middleware)
        if self.trace:
            self.middleware.append(optional("jobboard.observe.tracing", "otel", "--trace").job_spans())

    async def board(self, board: JobBoard) -> JobBoard:
        """``board``, wrapped for spans with ``--trace``."""
        if not self.trace:
            return board
        traced: JobBoard = optional("jobboard.observe.tracing", "otel", "--trace").TracedBoard(board)
        await traced.open()
        return traced

    async def run(self, worker: Worker) -> WorkerStats:
        """Run ``worker`` (signals handled), serving its metrics meanwhile with ``--metrics-port``."""
        if self.metrics is None:
            return await worker.run(handle_signals=True)
        self.metrics.watch(worker)
        listener = await bind(self.host, self.port)  # before the task group: its error stays one line
        async with anyio.create_task_group() as group:
            group.start_soon(self.metrics.serve, listener)
            stats = await worker.run(handle_signals=True)
            group.cancel_scope.cancel()
        return stats
