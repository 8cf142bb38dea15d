"""``jobboard metrics``: a board's gauges for Prometheus, from its live view (``jobboard[metrics]``)."""

from __future__ import annotations

import argparse
import signal

import anyio

from jobboard.board.contract import JobBoard
from jobboard.cli.command import port_number
from jobboard.cli.observe import DEFAULT_HOST, bind, optional

DEFAULT_PORT = 9465
EXAMPLE = """example:
  jobboard metrics zookeeper://zk:2181/jobs --port 9465   # then scrape http://127.0.0.1:9465/metrics

The gauges (jobs by state, name and priority, oldest unclaimed age, trash size, live
workers) are computed at each scrape from a live view of the board kept by its events:
no read per job per scrape. Stops on SIGTERM or SIGINT (exit 0)."""


def metrics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog, parser.formatter_class = EXAMPLE, argparse.RawDescriptionHelpFormatter
    parser.add_argument("url", nargs="?", help="board URL (or --board / $JOBBOARD_URL)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help=f"port to serve /metrics on (default {DEFAULT_PORT}; 0: a free port, printed)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to serve on (default {DEFAULT_HOST})")


async def serve_board_metrics(board: JobBoard, args: argparse.Namespace) -> int:
    """Serve the board's gauges until SIGTERM or SIGINT."""
    metrics = optional("jobboard.observe.metrics", "metrics", "jobboard metrics")
    from prometheus_client import CollectorRegistry

    from jobboard.observe.live import LiveBoard

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with LiveBoard(board) as live:
            registry = CollectorRegistry()
            registry.register(metrics.BoardCollector(live))
            listener = await bind(args.host, args.port)
            async with anyio.create_task_group() as group:
                group.start_soon(metrics.serve_metrics, registry, listener)
                async for _ in signals:
                    break
                group.cancel_scope.cancel()
    return 0
