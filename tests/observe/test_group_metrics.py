"""The board's gauge of flow-control groups (issue 27): ``jobboard_board_group_jobs{group,state}``, whose
``claimed`` is the group's permits in use, from the live view (no read per scrape)."""

from __future__ import annotations

import uuid

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobboard import open_board
from jobboard.observe.live import LiveBoard
from jobboard.observe.metrics import BoardCollector


def group_samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {(sample.labels["group"], sample.labels["state"]): sample.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            if family.name == "jobboard_board_group_jobs" for sample in family.samples}


async def test_the_permits_in_use_are_the_claimed_jobs_of_each_group() -> None:
    async with open_board(f"memory://group-metrics-{uuid.uuid4().hex}") as board:
        await board.set_limit("tenant-42", concurrency=2)
        for _ in range(3):
            await board.post("export", group="tenant-42")
        await board.post("resize", group="tenant-7")
        await board.post("plain")
        claims = [await board.claim_next("w") for _ in range(3)]
        async with LiveBoard(board) as live:
            registry = CollectorRegistry()
            registry.register(BoardCollector(live))
            expected = {("tenant-42", "claimed"): 2.0, ("tenant-42", "unclaimed"): 1.0, ("tenant-7", "claimed"): 1.0}
            with anyio.fail_after(10):
                while group_samples(registry) != expected:  # noqa: ASYNC110 (the view follows events)
                    await anyio.sleep(0.02)
            for claim in claims:
                assert claim is not None
                await board.consume(claim)
            with anyio.fail_after(10):
                while group_samples(registry) != {("tenant-42", "unclaimed"): 1.0}:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
