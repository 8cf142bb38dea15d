"""Claims refused by flow control (issue 27): ``JobBoard.held_back`` counts ``claim(job)`` raising ``HeldBack``
by ``why``, and each ``claim_next`` that passed over held-back jobs once per ``why``; a worker's metrics export it
as ``jobboard_worker_claims_held_back_total{why}``."""

from __future__ import annotations

import uuid

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobboard import HeldBack, open_board
from jobboard.board.contract import JobBoard
from jobboard.job import Job
from jobboard.observe.metrics import WorkerMetrics
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers, JobContext

pytestmark = pytest.mark.timeout(30)


def held_back_samples(metrics: WorkerMetrics) -> dict[str, float]:
    return {sample.labels["why"]: sample.value
            for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
            if family.name == "jobboard_worker_claims_held_back" for sample in family.samples
            if sample.name.endswith("_total")}


async def refused(board: JobBoard, job: Job) -> str:
    with pytest.raises(HeldBack) as held:
        await board.claim(job, "by-id")
    return held.value.why


async def test_each_refusal_and_each_claim_next_skip_is_counted_by_why() -> None:
    async with open_board(f"memory://held-back-{uuid.uuid4().hex}") as board:
        handlers = Handlers()

        @handlers.register("export")
        async def export(ctx: JobContext) -> None:
            pass

        metrics = WorkerMetrics()
        worker, twin = Worker(board, handlers, WorkerConfig(burst=True)), Worker(board, handlers)
        metrics.watch(worker)
        metrics.watch(twin)  # two workers on one board: its refusals are counted once
        assert held_back_samples(metrics) == {"paused": 0.0, "concurrency": 0.0, "sequence": 0.0, "rate": 0.0}

        await board.set_limit("full", concurrency=1)
        await board.set_limit("ordered", sequence=True)
        await board.set_limit("rated", rate=(1, 600.0))
        for group in ("full", "ordered", "rated"):
            await board.claim(await board.post("export", group=group), "holder")
        held = [await board.post("export", group=group) for group in ("full", "full", "ordered", "rated")]
        assert [await refused(board, job) for job in held] == ["concurrency", "concurrency", "sequence", "rate"]
        assert await board.claim_next("w") is None  # every job is held back: skipped, once per why
        await board.pause("export")
        assert await refused(board, await board.post("export")) == "paused"
        assert dict(board.held_back) == {"concurrency": 3, "sequence": 2, "rate": 2, "paused": 1}

        await board.resume("export")
        for group in ("full", "ordered", "rated"):
            await board.clear_limit(group)
        with anyio.fail_after(10):
            stats = await worker.run()  # claim_next skips nothing now: the counts stay
        assert stats.consumed == 5
        assert held_back_samples(metrics) == {"paused": 1.0, "concurrency": 3.0, "sequence": 2.0, "rate": 2.0}
