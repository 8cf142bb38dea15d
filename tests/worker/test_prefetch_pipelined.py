"""A prefetching worker's hot path: a held claim known current a moment ago starts with no read (one call a job,
its consume, plus a claim call per batch), and a slot starts its next held job as soon as the finished job's
settle is sent (at most ``prefetch`` settles in flight beyond the running jobs; a stop drains them; their
errors are met as a slot's settle meets them)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from jobboard import JobBoard, JobContext, JobState, open_board
from jobboard.backend import Settle
from jobboard.job import Claim
from jobboard.worker import ahead
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.wrappers.faulty import FaultyBoard
from jobboard.wrappers.wrapped import WrappedBackend
from jobboard_redis.board import RedisBackend

pytestmark = pytest.mark.timeout(60)


def board_url(backend: str, redis_url: str) -> str:
    name = f"pipelined-{uuid.uuid4().hex}"
    return f"{redis_url}/0/{name}?session_timeout=30" if backend == "redis" else f"memory://{name}"


async def nothing(ctx: JobContext) -> None:
    """A handler that does nothing."""


def count_requests(backend: RedisBackend) -> Counter[str]:
    """Count the requests the board's client sends (script calls, pipelines of reads, single commands)."""
    counted: Counter[str] = Counter()
    client = backend.client
    for name in ("call", "pipeline", "command"):
        original = getattr(client, name)

        def wrapped(*args: Any, _original: Callable[..., Any] = original, _name: str = name, **kwargs: Any) -> Any:
            counted[_name] += 1
            if _name == "call":
                counted[f"call {args[0]}"] += 1
            return _original(*args, **kwargs)

        setattr(client, name, wrapped)
    return counted


@pytest.mark.parametrize(("prefetch", "most"), [(4, 1.4), (0, 1.2)])
async def test_a_worker_makes_one_call_per_job(prefetch: int, most: float, redis_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """redis://, one slot, 60 jobs of a handler that never waits: a consume per job (fused with the next claim
    without prefetch; with prefetch 4, a claim call per 5 jobs), and no read: neither of each held claim before
    it starts (``claim_status``) nor the claim watcher's of a job done before it began (3.07 and 2.08 requests
    a job before, 1.27 and 1.08 after)."""
    monkeypatch.setattr(ahead, "HELD_FRESH", 60.0, raising=False)  # whatever the machine's load: none is stale
    with anyio.fail_after(40):
        async with open_board(board_url("redis", redis_url)) as board:
            for _ in range(60):
                await board.post("x")
            assert isinstance(board.backend, RedisBackend)
            counted = count_requests(board.backend)
            stats = await Worker(board, nothing, WorkerConfig(prefetch=prefetch, burst=True)).run()
    assert stats.consumed == 60
    per_job = sum(count for name, count in counted.items() if " " not in name) / 60
    assert per_job < most, (per_job, counted)  # the worker's start and stop and a last empty claim beside


async def test_claimers_take_from_a_claim_call_in_flight(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis://, prefetch 8, 4 slots, 90 jobs: a claimer that finds nothing held while another's claim call in
    flight brings more than the claimers already waiting for it waits for that call rather than make its own
    (``claim_many`` of one and the little room left): about a claim call per 9 jobs."""
    monkeypatch.setattr(ahead, "HELD_FRESH", 60.0, raising=False)
    with anyio.fail_after(40):
        async with open_board(board_url("redis", redis_url)) as board:
            for _ in range(90):
                await board.post("x")
            assert isinstance(board.backend, RedisBackend)
            counted = count_requests(board.backend)
            stats = await Worker(board, nothing, WorkerConfig(prefetch=8, concurrency=4, burst=True)).run()
    assert stats.consumed == 90
    # and the slots' last empty claims, some made again when a held job's end made them stale (burst: the end
    # may have readied work the empty answer predates); seen 14-15
    assert counted["call claim_many"] <= 90 / 9 + 4 + 4, counted


class SlowSettles(WrappedBackend):
    """Settles that take ``delay`` seconds before the inner backend's (a far server), counted while in flight."""

    def __init__(self, inner: Any, delay: float, full: int = 3) -> None:
        super().__init__(inner)
        self.delay, self.in_flight, self.most = delay, 0, 0
        self.full = anyio.Event()
        """Set once ``full`` settles are in flight at once."""
        self._full = full

    async def settle(self, claim: Claim, settle: Settle) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self._full:
            self.full.set()
        try:
            await anyio.sleep(self.delay)
            await self.inner.settle(claim, settle)
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_settles_in_flight_never_exceed_the_bound(backend: str, redis_url: str) -> None:
    """prefetch 3, one slot, settles taking 0.5 s: the slot goes on while up to 3 settle (not 1, as a slot
    waiting for each would), never more; one handler at a time; every job consumed and counted."""
    with anyio.fail_after(40):
        async with open_board(board_url(backend, redis_url)) as inner:
            jobs = [(await inner.post("x")).id for _ in range(12)]
            slow = SlowSettles(inner.backend, 0.5)
            board = JobBoard(slow)
            running, most_running = 0, 0

            async def handler(ctx: JobContext) -> None:
                nonlocal running, most_running
                running += 1
                most_running = max(most_running, running)
                await anyio.lowlevel.checkpoint()
                running -= 1

            worker = Worker(board, handler, WorkerConfig(prefetch=3, concurrency=1, burst=True))
            stats = await worker.run()
            assert [await inner.state(job) for job in jobs] == [JobState.COMPLETE] * 12
    assert (slow.most, most_running) == (3, 1)
    assert (stats.claimed, stats.consumed, stats.lost, stats.unsettled) == (12, 12, 0, 0)


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_stop_drains_the_settles_in_flight(backend: str, redis_url: str) -> None:
    """Stopped with three settles in flight (and a fourth waiting for room): ``run()`` returns once all four
    applied, each counted consumed; nothing is left claimed."""
    with anyio.fail_after(40):
        async with open_board(board_url(backend, redis_url)) as inner:
            jobs = [(await inner.post("x")).id for _ in range(4)]
            slow = SlowSettles(inner.backend, 1.0)
            worker = Worker(JobBoard(slow), nothing, WorkerConfig(prefetch=3, concurrency=1, grace_period=10))
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await slow.full.wait()
                worker.stop()
            assert [await inner.state(job) for job in jobs] == [JobState.COMPLETE] * 4
            assert [await inner.owner(job) for job in jobs] == [None] * 4
    assert (worker.stats.claimed, worker.stats.consumed, worker.stats.released) == (4, 4, 0)


@pytest.mark.parametrize("kind", ["claim_lost", "unavailable"])
@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_pipelined_settle_meets_errors_as_a_slot_does(backend: str, kind: str, redis_url: str) -> None:
    """A ClaimLost at a settle handed off is counted lost (the job, given back, runs again); a
    BackendUnavailable is retried until it applies. Every job ends complete."""
    with anyio.fail_after(40):
        async with open_board(board_url(backend, redis_url)) as inner:
            jobs = [(await inner.post("x")).id for _ in range(6)]
            board = FaultyBoard(inner, seed=7, rate=1.0, methods={"consume"}, kinds=(kind,), budget=1)
            worker = Worker(board, nothing, WorkerConfig(prefetch=3, concurrency=1, burst=True))
            stats = await worker.run()
            assert [await inner.state(job) for job in jobs] == [JobState.COMPLETE] * 6
    assert board.injected == Counter({("consume", kind): 1})
    settles = worker._settles
    assert settles is not None and settles.handed == stats.claimed
    if kind == "claim_lost":
        assert (stats.claimed, stats.consumed, stats.lost) == (7, 6, 1)
    else:
        assert (stats.claimed, stats.consumed, stats.lost, stats.backend_errors) == (6, 6, 0, 1)
