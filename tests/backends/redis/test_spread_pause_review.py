"""Review of pauses on the spread redis:// board (``?cluster=1&partitions=K``): a pause or resume made after
partition 0 lost its last writes (a failover with asynchronous replication) must still reach every partition,
whatever bookkeeping orders the calls (the fix of the pause/resume race keeps an order counter, ``pzo``, and
each name's last applied order, ``pzv``)."""

from __future__ import annotations

import anyio
import pytest

from jobboard import open_board
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401
from tests.backends.redis.test_spread_flow import PARTITIONS, backend, spread_url

pytestmark = pytest.mark.timeout(60)


async def test_a_pause_after_partition_zero_lost_its_last_writes_reaches_every_partition(
        cluster_seeds: str) -> None:  # noqa: F811
    """Four pauses and resumes of x, then partition 0 as a failover that lost the last two would leave it
    (any order counter and x's applied order two back, x resumed as after the second call): the next pause
    holds on every partition, as ``paused()`` says."""
    with anyio.fail_after(30):
        url = spread_url(cluster_seeds)
        async with open_board(url) as a, open_board(url) as b, open_board(url) as c:
            boards = (a, b, c)
            assert sorted(backend(board).home for board in boards) == list(range(PARTITIONS))
            for board in boards:
                await board.post("x")
            for _ in range(2):
                await a.pause("x")
                await a.resume("x")
            zero = backend(a).parts[0]
            prefix = zero.options.prefix
            counter = await zero.client.command("GET", prefix + "pzo")
            if counter is not None:  # an order counter: two increments lost with the failover
                await zero.client.command("SET", prefix + "pzo", int(counter) - 2)
            if await zero.client.command("HGET", prefix + "pzv", "x") is not None:
                await zero.client.command("HSET", prefix + "pzv", "x", int(counter or 2) - 2)
            await b.pause("x")
            assert (await c.paused()).names == {"x"}
            claimed = [claim for board in boards if (claim := await board.claim_next("w")) is not None]
            assert claimed == [], f"{len(claimed)} claims of a paused name granted"
            await c.resume("x")
            assert (await a.paused()).names == set()
            claimed = [claim for board in boards if (claim := await board.claim_next("w")) is not None]
            assert len(claimed) == len(boards)
