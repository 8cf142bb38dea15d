"""Flow control on a spread redis:// board (``?cluster=1&partitions=K``; jobboard_redis.spread.flow): a group's
jobs, limit and permits in the group's partition only; pauses written to every partition, partition 0 last."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost
from jobboard_redis.cluster import key_slot
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread.flow import group_index
from jobboard_redis.spread.layout import open_layout
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401
from tests.support.rediscluster import RedisCluster

pytestmark = pytest.mark.timeout(60)
PARTITIONS = 3


def spread_url(seeds: str) -> str:
    return f"redis://{seeds}/0/spreadflow-{uuid.uuid4().hex}?cluster=1&partitions={PARTITIONS}&session_timeout=4"


def backend(board: JobBoard) -> SpreadBackend:
    assert isinstance(board.backend, SpreadBackend)
    return board.backend


@contextlib.asynccontextmanager
async def three_boards_holding_x(url: str) -> AsyncIterator[tuple[JobBoard, JobBoard, JobBoard]]:
    """Three boards on ``url`` (one home each on a board of three partitions), each having posted a job ``x``
    to its home: the set-up of the pause and order reviews."""
    async with open_board(url) as a, open_board(url) as b, open_board(url) as c:
        for board in (a, b, c):
            await board.post("x")
        yield a, b, c


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
                jobs += await board.post_many([NewJob("x", group=group), NewJob("x", group=group, key=f"{group}-other")])
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


@pytest.fixture
def fresh_cluster() -> Iterator[RedisCluster]:
    with RedisCluster() as started:  # appendfsync always, one replica per master
        yield started


@pytest.mark.skipif(not os.environ.get("JOBBOARD_SPREAD_FAILOVER"), reason="JOBBOARD_SPREAD_FAILOVER=1 runs it "
                    "(its own cluster and a failover: ~20 s)")
@pytest.mark.parametrize("how", ["graceful", "kill"])
async def test_a_limit_holds_across_a_failover_of_its_partitions_master(fresh_cluster: RedisCluster, how: str) -> None:
    """Claimers on three boards (three home partitions) run a group limited to 2 while its partition's master
    is failed over (graceful, or its master killed), mid-run: never more than 2 running, every job consumed once,
    the limit still set and no permit left."""
    url = fresh_cluster.url(f"spreadflow-{uuid.uuid4().hex}", durability="strict", session_timeout=5,
                            connect_timeout=20, partitions=PARTITIONS)
    layout = await open_layout(parse_redis_url(url))
    slot = key_slot(f"{{{layout.roots[group_index('g', PARTITIONS)]}}}")
    running, most, consumed = 0, 0, []
    async with open_board(url) as one, open_board(url) as two, open_board(url) as three:
        await one.set_limit("g", concurrency=2)
        posted = await one.post_many([NewJob("x", {"n": n}, group="g") for n in range(150)])

        async def claimer(board: JobBoard) -> None:
            nonlocal running, most
            while await board.job_count():
                claim = await board.claim_next("w")
                if claim is None:
                    await anyio.sleep(0.02)
                    continue
                running += 1
                most = max(most, running)
                await anyio.sleep(0.02)
                running -= 1
                try:
                    await board.consume(claim)
                except ClaimLost:  # its session lost in the failover: the job is claimed again
                    continue
                consumed.append(claim.job.id)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as claimers:
                for board in (one, two, three, one):
                    claimers.start_soon(claimer, board)
                await anyio.sleep(0.5)
                before = len(consumed)
                await anyio.to_thread.run_sync(fresh_cluster.failover, slot, how)
        print(fresh_cluster.failovers, f"{before} of {len(posted)} consumed when it began")
        assert 0 < before < len(posted)  # the failover began while the claimers ran
        assert most == 2 and sorted(consumed) == sorted(job.id for job in posted)
        assert [(limit.group, limit.concurrency, limit.running) for limit in await two.limits()] == [("g", 2, 0)]


@pytest.mark.parametrize("layout", ["flat", "spread"])
async def test_a_rates_second_parked_job_comes_back_when_one_permit_is_free(
        request: pytest.FixtureRequest, layout: str) -> None:
    """Two jobs parked by a rate of 2 whose grants were 0.3 s apart: the first grant's expiry frees one permit,
    the refill puts one job back and must leave a timer for the other (it left none: the second job stayed
    parked for good, and ``wait()`` never returned; flow.lua's refill, found by the conformance rate case on the
    spread board)."""
    if layout == "flat":
        url = f"{request.getfixturevalue('redis_url')}/0/spreadflow-{uuid.uuid4().hex}?session_timeout=4"
    else:
        url = spread_url(request.getfixturevalue("cluster_seeds"))
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await board.set_limit("api", rate=(2, 0.6))
            jobs = [await board.post("call", group="api") for _ in range(4)]
            claims = [await board.claim_next("w")]
            await anyio.sleep(0.3)
            claims.append(await board.claim_next("w"))
            assert await board.claim_next("w") is None  # both others parked
            for expected in jobs[2:]:
                with anyio.fail_after(3):
                    woke = await board.wait()
                assert [job.id for job in woke] == [expected.id]
                claims.append(await board.claim_next("w"))
            assert [claim.job.id for claim in claims if claim] == [job.id for job in jobs]
