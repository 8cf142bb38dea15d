"""The worker driven through two thousand jobs by a board that fails, hangs and loses claims (seeded).

Invariants: the worker never dies; no job is settled twice; every settle
applies within a bound after its handler finished; every job ends consumed or
trashed; the worker's counters add up and match what the board saw.
Replay a failure with ``JOBBOARD_FAULT_SEED=<seed printed>``: the faults drawn are seeded, though the
interleaving of the concurrent jobs (and so which call meets which fault) also depends on timing.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import Counter

import anyio
import pytest

from jobboard import EventKind, JobBoard, open_board
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Fail, Handlers, JobContext, Retry, RetryPolicy
from jobboard.wrappers.faulty import FaultyBoard

pytestmark = pytest.mark.timeout(120)

JOBS = 2000
SETTLE_BOUND = 5.0
"""Seconds within which a finished job's settle applies despite the injected faults."""


def seeds() -> list[int]:
    chosen = os.environ.get("JOBBOARD_FAULT_SEED")
    return [int(chosen)] if chosen else [20261123, 7]


def make_handlers(rng: random.Random, finished: dict[tuple[str, int], float]) -> Handlers:
    handlers = Handlers()
    fates = {}

    @handlers.register("work")
    async def work(ctx: JobContext) -> int:
        fate = fates.setdefault(ctx.job.id, rng.choices(["ok", "flaky", "broken", "fail", "retry"],
                                                        [70, 12, 8, 5, 5])[0])
        try:
            await anyio.sleep(rng.choice([0, 0, 0.001, 0.005]))
            if fate == "flaky" and ctx.attempt == 1:
                raise ConnectionError("flaky downstream")
            if fate == "broken":
                raise ValueError("always broken")
            if fate == "fail":
                raise Fail("bad input")
            if fate == "retry" and ctx.attempt < 2:
                raise Retry(0.01)
            return int(ctx.details["i"])
        finally:
            finished[(ctx.job.id, ctx.generation)] = time.monotonic()

    return handlers


async def count_events(board: JobBoard, seen: Counter[tuple[EventKind, str]], ended: set[str],
                       done: anyio.Event) -> None:
    async for event in board.events(maxlen=1_000_000):
        if event.kind in (EventKind.CONSUMED, EventKind.TRASHED) and event.job_id is not None:
            seen[(event.kind, event.job_id)] += 1
            ended.add(event.job_id)
            if len(ended) == JOBS:
                done.set()


@pytest.mark.parametrize("seed", seeds())
async def test_worker_survives_two_thousand_jobs_and_hundreds_of_injected_faults(seed: int) -> None:
    print(f"seed {seed}")
    finished: dict[tuple[str, int], float] = {}
    seen: Counter[tuple[EventKind, str]] = Counter()
    ended: set[str] = set()
    done = anyio.Event()
    policy = RetryPolicy(max_attempts=3, initial_delay=0.005, max_delay=0.02)
    config = WorkerConfig(concurrency=8, retry=policy, settle_timeout=0.05, idle_backoff=0.01, idle_backoff_max=0.2)
    with anyio.fail_after(100):
        async with open_board(f"memory://faults-{uuid.uuid4().hex}") as inner:
            board = FaultyBoard(inner, seed=seed, rate=0.1, hang_for=0.2)
            await board.open()
            worker = Worker(board, make_handlers(random.Random(seed), finished), config)
            started = time.monotonic()
            async with anyio.create_task_group() as group:
                group.start_soon(count_events, inner, seen, ended, done)
                for i in range(JOBS):
                    await inner.post("work", {"i": i})
                group.start_soon(worker.run)
                await done.wait()
                worker.stop()
                board.enabled = False
                await anyio.sleep(0.05)  # the last events reach the counter
                group.cancel_scope.cancel()
            elapsed = time.monotonic() - started
            left = await inner.job_count()
    stats, injected = worker.stats, board.injected
    lost_replies = board.lost_replies
    # A claim past the policy's attempts (lost claim replies count attempts too) is trashed unrun.
    unrun = [(method, job) for method, job, generation, _ in board.applied if (job, generation) not in finished]
    assert all(method == "trash" for method, _ in unrun), unrun
    delays = [at - finished[(job, generation)] for _, job, generation, at in board.applied
              if (job, generation) in finished]
    print(f"{JOBS} jobs in {elapsed:.1f}s; {sum(injected.values())} faults injected: {dict(sorted(injected.items()))}")
    print(f"stats: {stats.as_dict()}; slowest settle {max(delays):.3f}s after its handler")
    assert left == 0 and len(ended) == JOBS
    assert max(seen.values()) == 1, "a job consumed or trashed twice"
    applied = Counter((job, generation) for _, job, generation, _ in board.applied)
    assert max(applied.values()) == 1, "a claim settled twice"
    assert max(delays) < SETTLE_BOUND
    assert stats.claimed == stats.settled() and stats.unsettled == 0
    consumed = sum(1 for kind, _ in seen if kind is EventKind.CONSUMED)
    trashed = sum(1 for kind, _ in seen if kind is EventKind.TRASHED)
    assert consumed == stats.consumed + lost_replies["consume"]
    assert trashed == stats.failed + lost_replies["trash"]
    assert sum(injected.values()) >= 700 and stats.backend_errors > 200  # ~890 seen: 10 % of ~8,900 calls
