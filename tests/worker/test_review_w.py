"""Review of the session's worker changes (pipelined settles, claim-ahead hot path): guarantees that hold,
checked with prefetch on memory:// (sequences, concurrency, run-once, the settles' bound)."""

from __future__ import annotations

import uuid
from collections import Counter

import anyio
import pytest

from jobboard import JobBoard, JobContext
from jobboard.errors import JobNotFound
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard_memory import MemoryBackend

pytestmark = pytest.mark.timeout(30)


async def test_prefetch_keeps_concurrency_and_runs_each_job_once() -> None:
    """prefetch 6 over 2 slots, 60 jobs: never more than 2 handlers at once, each job run once, all consumed."""
    now, most, runs = 0, 0, Counter[str]()

    async def work(ctx: JobContext) -> None:
        nonlocal now, most
        now += 1
        most = max(most, now)
        runs[ctx.job.id] += 1
        await anyio.sleep(0.001)
        now -= 1

    async with JobBoard(MemoryBackend(f"memory://{uuid.uuid4().hex}")) as board:
        for number in range(60):
            await board.post("work", {"n": number})
        with anyio.fail_after(20):
            stats = await Worker(board, work, WorkerConfig(prefetch=6, concurrency=2, burst=True)).run()
        assert await board.job_count() == 0
    assert most <= 2
    assert len(runs) == 60 and set(runs.values()) == {1}
    assert stats.consumed == 60


async def test_prefetch_sequence_starts_after_its_predecessor_consumed() -> None:
    """A sequence group with prefetch and pipelined settles: each job starts only once its predecessor is
    consumed on the board (never while that consume is in flight), in order."""
    order: list[int] = []
    seen_live: list[int] = []

    async with JobBoard(MemoryBackend(f"memory://{uuid.uuid4().hex}")) as board:
        await board.set_limit("s", sequence=True)
        ids = [(await board.post("step", {"n": n}, group="s")).id for n in range(15)]

        async def step(ctx: JobContext) -> None:
            n = ctx.job.details["n"]
            order.append(n)
            if n > 0:
                try:
                    await board.get(ids[n - 1])
                    seen_live.append(n)  # its predecessor still on the board: not consumed yet
                except JobNotFound:  # consumed, as it should be
                    pass
            await anyio.sleep(0.001)

        with anyio.fail_after(20):
            await Worker(board, step, WorkerConfig(prefetch=4, concurrency=3, burst=True)).run()
    assert order == list(range(15))
    assert seen_live == []
