"""Prometheus metrics for workers and boards (``pip install 'jobboard[metrics]'``).

* :class:`WorkerMetrics`: worker middleware (jobs started and finished by name
  and handler result, a duration histogram, attempts, jobs in flight) plus the
  worker's own counters read at scrape time (settled outcomes, claims, claim
  races, claim losses, backend errors, claims flow control refused):
  ``Worker(..., middleware=[m.middleware])`` then ``m.watch(worker)``.
* :class:`BoardCollector`: gauges of a whole board computed at scrape time from a
  :class:`~jobboard.observe.live.LiveBoard` (no I/O: the live view is kept by events).
* :func:`serve_metrics`: an HTTP endpoint on the event loop (so collectors read
  the worker's and the live view's state from the loop's own thread).

The names are in docs/metrics.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.stapled import MultiListener
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from jobboard.worker.handlers import JobContext
from jobboard.worker.retry import Fail, Retry
from jobboard.worker.stats import OUTCOMES

if TYPE_CHECKING:
    from jobboard.observe.live import LiveBoard
    from jobboard.worker.conductor import Worker

__all__ = ["BoardCollector", "WorkerMetrics", "bind_metrics", "bound_port", "serve_metrics"]

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                    3600.0)
ATTEMPT_BUCKETS = (1, 2, 3, 5, 10, 20)
ANSWER_TIMEOUT = 30.0
"""Seconds one scrape's connection may take (a client that sends nothing is dropped)."""
TEXT = "text/plain; charset=utf-8"
HELD_BACK_WHYS = ("paused", "concurrency", "sequence", "rate")
"""Every ``HeldBack.why``: each is exported, 0 until counted."""
logger = logging.getLogger(__name__)


def handler_result(error: BaseException | None) -> str:
    """How a handler ended: ``ok``, ``retry`` (``Retry``), ``fail`` (``Fail``), ``error`` or ``cancelled``."""
    if error is None:
        return "ok"
    if isinstance(error, Retry):
        return "retry"
    if isinstance(error, Fail):
        return "fail"
    return "error" if isinstance(error, Exception) else "cancelled"


class WorkerMetrics:
    """A worker's metrics in ``registry`` (a new one by default); see the module docstring."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.workers: list[Worker] = []
        self.started = Counter("jobboard_worker_jobs_started", "Job runs started, by job name", ["name"],
                               registry=self.registry)
        self.finished = Counter("jobboard_worker_jobs_finished", "Job runs finished, by job name and handler "
                                "result (ok, retry, fail, error, cancelled)", ["name", "result"],
                                registry=self.registry)
        self.duration = Histogram("jobboard_worker_job_duration_seconds", "Handler run time, by job name and "
                                  "result", ["name", "result"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.attempt = Histogram("jobboard_worker_job_attempt", "Which attempt each run was (1: the first)",
                                 ["name"], buckets=ATTEMPT_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("jobboard_worker_jobs_in_flight", "Handlers running now, by job name", ["name"],
                               registry=self.registry)
        self.registry.register(_WorkerCollector(self.workers))
        self._by_name: dict[str, tuple[Any, Any, Any]] = {}
        self._by_result: dict[tuple[str, str], tuple[Any, Any]] = {}

    async def serve(self, listener: MultiListener[SocketStream]) -> None:
        """Serve this registry on ``listener`` (see :func:`bind_metrics`) until cancelled."""
        await serve_metrics(self.registry, listener)

    def watch(self, worker: Worker) -> None:
        """Also export ``worker``'s counters (outcomes, claims, races, losses, backend errors) at each scrape."""
        self.workers.append(worker)

    async def middleware(self, ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Worker middleware: counts and times every job run (register it outermost to time the others)."""
        name = ctx.job.name
        started, attempt, running = self._by_name.get(name) or self._add_name(name)
        started.inc()
        attempt.observe(ctx.attempt)
        running.inc()
        began, error = time.perf_counter(), None
        try:
            return await call_next()
        except BaseException as caught:
            error = caught
            raise
        finally:
            running.dec()
            result = handler_result(error)
            finished, duration = self._by_result.get((name, result)) or self._add_result(name, result)
            finished.inc()
            duration.observe(time.perf_counter() - began)

    def _add_name(self, name: str) -> tuple[Any, Any, Any]:
        """The labelled children of one job name (looked up once: ``labels()`` takes a lock)."""
        found = self._by_name[name] = (self.started.labels(name), self.attempt.labels(name),
                                       self.in_flight.labels(name))
        return found

    def _add_result(self, name: str, result: str) -> tuple[Any, Any]:
        found = self._by_result[(name, result)] = (self.finished.labels(name, result),
                                                   self.duration.labels(name, result))
        return found


class _WorkerCollector:
    """The watched workers' own counters (``worker.stats``), summed, read at scrape time."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    def _total(self, field: str) -> int:
        return sum(int(getattr(worker.stats, field)) for worker in self.workers)

    def collect(self) -> Iterator[Metric]:
        outcomes = CounterMetricFamily("jobboard_worker_jobs", "Claimed jobs by how they ended (the worker's "
                                       "counters: consumed, retried, failed, lost, cancelled...)",
                                       labels=["outcome"])
        for outcome in OUTCOMES:
            outcomes.add_metric([outcome], self._total(outcome))
        yield outcomes
        for name, field, text in (
            ("claims", "claimed", "Jobs claimed"),
            ("claim_races", "claim_races", "Claims that found nothing right after the board offered work"),
            ("claim_losses", "lost", "Claims lost while the job ran or at its settle"),
            ("backend_errors", "backend_errors", "Transient backend errors ridden out"),
        ):
            yield CounterMetricFamily(f"jobboard_worker_{name}", text, value=self._total(field))
        yield GaugeMetricFamily("jobboard_worker_concurrency", "Jobs the worker may run at once",
                                value=sum(worker.config.concurrency for worker in self.workers))
        yield self._held_back()

    def _held_back(self) -> Metric:
        """Claims flow control refused or passed over on the watched workers' boards (``JobBoard.held_back``:
        ``claim(job)`` refusals and claim_next-like calls that passed a held-back job over; each board once)."""
        boards = list({id(worker.board): worker.board for worker in self.workers}.values())
        held = CounterMetricFamily("jobboard_worker_claims_held_back", "Claims refused by flow control on this "
                                   "process's boards (claim(job) raising HeldBack; claim_next and claim_many "
                                   "calls that passed over a held-back job, once per call), by why", labels=["why"])
        for why in HELD_BACK_WHYS:
            held.add_metric([why], sum(board.held_back[why] for board in boards))
        return held


class BoardCollector:
    """Gauges of one board from its live view, computed at scrape time (no read per job).

    While the view is not connected (``jobboard_board_up`` 0) only ``jobboard_board_up`` is
    exported: the board's gauges are absent rather than stale (their last values would look current).
    """

    def __init__(self, live: LiveBoard) -> None:
        self.live = live

    def collect(self) -> Iterable[Metric]:
        healthy = self.live.healthy
        if healthy:
            yield from self._board_gauges()
        yield GaugeMetricFamily("jobboard_board_up", "1 while the live view is connected to the board",
                                value=1.0 if healthy else 0.0)

    def _board_gauges(self) -> Iterator[Metric]:
        stats = self.live.stats()
        by_state = GaugeMetricFamily("jobboard_board_jobs", "Jobs on the board by state", labels=["state"])
        for state, count in sorted(stats.by_state.items()):
            by_state.add_metric([state], count)
        by_name = GaugeMetricFamily("jobboard_board_jobs_by_name", "Jobs on the board by name and state",
                                    labels=["name", "state"])
        for name, states in sorted(stats.by_name.items()):
            for state, count in sorted(states.items()):
                by_name.add_metric([name, state], count)
        by_priority = GaugeMetricFamily("jobboard_board_jobs_by_priority", "Jobs on the board by priority",
                                        labels=["priority"])
        for priority, count in sorted(stats.by_priority.items()):
            by_priority.add_metric([priority], count)
        running = GaugeMetricFamily("jobboard_board_worker_running_jobs", "Jobs each live worker holds",
                                    labels=["worker"])
        for worker in stats.workers:
            running.add_metric([worker.name], len(worker.running))
        yield from (by_state, by_name, by_priority, running, self._group_gauge())
        yield GaugeMetricFamily("jobboard_board_oldest_unclaimed_age_seconds", "Age of the oldest claimable "
                                "job (0: none)", value=stats.oldest_unclaimed_age or 0.0)
        yield GaugeMetricFamily("jobboard_board_trash_jobs", "Jobs in the trash", value=stats.trash_size)
        yield GaugeMetricFamily("jobboard_board_records", "The library's records of plans and schedules "
                                "(not counted as jobs)", value=stats.records)
        yield GaugeMetricFamily("jobboard_board_workers", "Live workers (registered entities)",
                                value=len(stats.workers))


    def _group_gauge(self) -> Metric:
        """Jobs of each flow-control group by state: ``claimed`` is the group's permits in use (a permit is a
        claim, issue 27), ``unclaimed`` its jobs waiting for one."""
        counts: dict[tuple[str, str], int] = {}
        for item in self.live.jobs():
            if item.job.group is not None:
                key = (item.job.group, item.state.value)
                counts[key] = counts.get(key, 0) + 1
        by_group = GaugeMetricFamily("jobboard_board_group_jobs", "Jobs of each flow-control group by state "
                                     "(claimed: the permits in use)", labels=["group", "state"])
        for (group, state), count in sorted(counts.items()):
            by_group.add_metric([group, state], count)
        return by_group


async def bind_metrics(host: str, port: int) -> MultiListener[SocketStream]:
    """A listener for :func:`serve_metrics` (``port`` 0: a free one, see :func:`bound_port`).

    :raises OSError: the address cannot be bound (in use, bad host).
    """
    return await anyio.create_tcp_listener(local_host=host, local_port=port)


def bound_port(listener: MultiListener[SocketStream]) -> int:
    port: int = listener.extra(SocketAttribute.local_port)
    return port


async def serve_metrics(registry: CollectorRegistry, listener: MultiListener[SocketStream]) -> None:
    """Answer ``GET /metrics`` with ``registry`` on ``listener`` until cancelled; then close it."""
    async with listener:
        await listener.serve(lambda stream: _answer(stream, registry))


async def _answer(stream: SocketStream, registry: CollectorRegistry) -> None:
    """One request, one response, then the connection closes; nothing here may stop the server."""
    async with stream:
        with anyio.move_on_after(ANSWER_TIMEOUT):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 16384:
                try:
                    request += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    return
            method, _, rest = request.partition(b" ")
            status, body, kind = _response(method, rest.split(b" ", 1)[0].split(b"?", 1)[0], registry)
            head = (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind.encode() + b"\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            try:
                await stream.send(head + (b"" if method == b"HEAD" else body))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return


def _response(method: bytes, path: bytes, registry: CollectorRegistry) -> tuple[bytes, bytes, str]:
    """Status, body and content type for one request."""
    if method not in (b"GET", b"HEAD") or path not in (b"/", b"/metrics"):
        return b"404 Not Found", b"not found: try /metrics\n", TEXT
    try:
        return b"200 OK", generate_latest(registry), CONTENT_TYPE_LATEST
    except Exception as error:  # a failing collector must not stop the worker
        logger.exception("collecting metrics failed")
        return b"500 Internal Server Error", f"collecting metrics failed: {error!r}\n".encode(), TEXT
