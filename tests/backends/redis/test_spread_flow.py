"""Flow control on a spread redis:// board (``?cluster=1&partitions=K``; jobboard_redis.spread.flow): a group's
jobs, limit and permits in the group's partition only; pauses written to every partition, partition 0 last."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread.flow import group_index
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401

pytestmark = pytest.mark.timeout(60)
PARTITIONS = 3


def spread_url(seeds: str) -> str:
    return f"redis://{seeds}/0/spreadflow-{uuid.uuid4().hex}?cluster=1&partitions={PARTITIONS}&session_timeout=4"


def backend(board: JobBoard) -> SpreadBackend:
    assert isinstance(board.backend, SpreadBackend)
    return board.backend


async def has_key(board: JobBoard, index: int, name: str) -> bool:
    part = backend(board).parts[index]
    return bool(await part.client.command("EXISTS", part.options.prefix + name))


def groups_by_partition() -> dict[int, str]:
    """One group name per partition."""
    found: dict[int, str] = {}
    for n in range(1000):
        found.setdefault(group_index(f"g{n}", PARTITIONS), f"g{n}")
    assert len(found) == PARTITIONS
    return found


async def test_a_groups_jobs_and_limit_live_in_its_partition_only(cluster_seeds: str) -> None:  # noqa: F811
    """Whatever a job's key or dependencies, its group places it; only that partition holds ``lim``."""
    groups = groups_by_partition()
    with anyio.fail_after(30):
        async with open_board(spread_url(cluster_seeds)) as board:
            spread = backend(board)
            deps = [await board.post("dep", key=f"k{n}") for n in range(6)]  # keys spread them
            for index, group in groups.items():
                await board.set_limit(group, concurrency=1)
                jobs = [await board.post("x", group=group), await board.post("x", group=group, key=f"{group}-key"),
                        await board.post("x", group=group, depends_on=[dep.id for dep in deps])]
                jobs += await board.post_many([NewJob("x", group=group), NewJob("x", group=group, key="other")])
                assert {spread.parts.index(spread.part_of(job.id)) for job in jobs} == {index}
                assert [await has_key(board, k, "lim") for k in range(PARTITIONS)] == [
                    k == index for k in range(PARTITIONS)]
                await board.clear_limit(group)
            assert await board.limits() == []


async def test_limits_are_read_from_each_groups_partition(cluster_seeds: str) -> None:  # noqa: F811
    groups = groups_by_partition()
    with anyio.fail_after(30):
        async with open_board(spread_url(cluster_seeds)) as board, open_board(board.url) as other:
            for count, group in enumerate(groups.values(), start=1):
                await board.set_limit(group, concurrency=count)
                for _ in range(count + 1):
                    await board.post("x", group=group)
            claims = [await other.claim_next("w") for _ in range(len(groups) * 2)]
            listed = {limit.group: (limit.concurrency, limit.running, limit.waiting) for limit in await other.limits()}
            assert listed == {group: (count, count, 1) for count, group in enumerate(groups.values(), start=1)}
            assert sum(claim is not None for claim in claims) == sum(range(1, len(groups) + 1))
            assert await other.clear_limit(groups[0]) and not await other.clear_limit(groups[0])


async def test_a_pause_holds_a_name_in_every_partition(cluster_seeds: str) -> None:  # noqa: F811
    """Three boards (one home partition each) post a name; a pause from one stops its claims on all of them,
    partition 0 answers ``paused()``; the whole board likewise."""
    with anyio.fail_after(30):
        url = spread_url(cluster_seeds)
        async with open_board(url) as one, open_board(url) as two, open_board(url) as three:
            boards = (one, two, three)
            assert sorted(backend(board).home for board in boards) == list(range(PARTITIONS))
            posted = [await board.post("x") for board in boards]
            await one.pause("x")
            assert [await has_key(one, k, "pz") for k in range(PARTITIONS)] == [True] * PARTITIONS
            assert (await three.paused()).names == {"x"}
            assert [await board.claim_next("w") for board in boards] == [None] * PARTITIONS
            await two.resume("x")
            await two.pause(None)
            assert (await one.paused()).board
            assert [await board.claim_next("w") for board in boards] == [None] * PARTITIONS
            await three.resume(None)
            assert not (await one.paused()).board
            claimed = [await board.claim_next("w") for board in boards]
            assert sorted(claim.job.id for claim in claimed if claim) == sorted(job.id for job in posted)
