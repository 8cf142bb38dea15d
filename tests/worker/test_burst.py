"""Burst mode (``WorkerConfig(burst=True)``) on a board whose replies lag: it runs every job its jobs' ends
ready (a plan's chain, a fan-out), with or without ``prefetch``, at once rather than a second a step, and
then stops (review of 057430f: an empty answer to a claim sent before a job's end stopped the worker with
the job's dependent still on the board)."""

from __future__ import annotations

import uuid
from collections.abc import Collection

import anyio
import pytest

from jobboard import JobState
from jobboard.board.contract import JobBoard
from jobboard.job import Claim
from jobboard.worker import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers, JobContext
from jobboard.worker.stats import WorkerStats
from jobboard_memory import MemoryBackend

pytestmark = pytest.mark.timeout(60)


class Lagging(MemoryBackend):
    """memory:// whose claims are answered ``claim_lag`` after the board decided them, and whose settles are
    applied ``settle_lag`` after they are asked for (a server's round trips, in one process)."""

    claim_lag = 0.0
    settle_lag = 0.0
    claims = 0

    async def claim_next(self, owner: str, names: Collection[str] | None = None) -> Claim | None:
        self.claims += 1
        claim = await super().claim_next(owner, names)
        await anyio.sleep(self.claim_lag)
        return claim

    async def settle(self, claim: Claim, settle: object) -> object:  # type: ignore[override]
        await anyio.sleep(self.settle_lag)
        return await super().settle(claim, settle)  # type: ignore[arg-type]


async def post_chain(board: JobBoard, length: int) -> list[str]:
    jobs = [await board.post("j", {"i": 0})]
    for index in range(1, length):
        jobs.append(await board.post("j", {"i": index}, depends_on=[jobs[-1]]))
    return jobs


async def burst(board: JobBoard, handler: object, **config: object) -> WorkerStats:
    handlers = Handlers()
    handlers.register("j")(handler)  # type: ignore[arg-type]
    with anyio.fail_after(20):
        return await Worker(board, handlers, WorkerConfig(burst=True, **config)).run()  # type: ignore[arg-type]


async def noop(ctx: JobContext) -> None:
    return None


@pytest.mark.parametrize("concurrency", [1, 2, 16])
async def test_a_burst_worker_with_prefetch_runs_a_whole_chain(concurrency: int) -> None:
    """With ``prefetch`` a slot is free before its job's consume is applied, so a claim answered before the
    consume readied the next step came back empty; the worker then stopped with 5 of 6 steps on the board
    (concurrency 1 and 2 before 057430f too; 16 since it)."""
    backend = Lagging(f"memory://{uuid.uuid4().hex}")
    backend.claim_lag, backend.settle_lag = 0.05, 0.005
    async with JobBoard(backend) as board:
        chain = await post_chain(board, 6)
        stats = await burst(board, noop, concurrency=concurrency, prefetch=2)
        states = [await board.state(job) for job in chain]
    assert stats.consumed == 6 and states == [JobState.COMPLETE] * 6, (stats, states)


async def test_a_chain_beside_a_long_job_runs_at_once_not_a_second_a_step() -> None:
    """A wake-up given while no claimer waited was lost: each step of a chain waited for the next job's end or
    a second (1.0, 2.0, 3.0 ... s after the start), while a long job kept the worker alive."""
    backend = Lagging(f"memory://{uuid.uuid4().hex}")
    backend.claim_lag = 0.001
    started: list[float] = []
    began = 0.0

    async def handler(ctx: JobContext) -> None:
        if ctx.job.details.get("long"):
            await anyio.sleep(2)
        else:
            started.append(anyio.current_time() - began)

    async with JobBoard(backend) as board:
        await board.post("j", {"long": 1})
        await post_chain(board, 6)
        began = anyio.current_time()
        stats = await burst(board, handler, concurrency=16, prefetch=2)
    assert stats.consumed == 7
    assert max(started) < 0.5, started  # seen: 0.02 s for the sixth step; 4.0 s before


async def test_a_fan_out_is_run_whole_with_few_empty_claims() -> None:
    """One job readies 40 dependents at its consume: every one runs, and the claimers do not storm (38,830
    claims before 057430f)."""
    backend = Lagging(f"memory://{uuid.uuid4().hex}")
    backend.claim_lag = 0.001
    async with JobBoard(backend) as board:
        root = await board.post("j", {"root": 1})
        dependents = [await board.post("j", {"i": index}, depends_on=[root]) for index in range(40)]
        stats = await burst(board, noop, concurrency=16)
        states = {await board.state(job) for job in dependents}
    assert stats.consumed == 41 and states == {JobState.COMPLETE}
    assert backend.claims <= 41 + 4 * 16, backend.claims
