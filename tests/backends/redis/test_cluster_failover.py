"""redis:// on a Redis Cluster (``?cluster=1``): the board's slot's master failed over under load.

On a fresh 3-master cluster (each master with one replica, ``appendfsync always``), one board posts keyed
jobs throughout and four claimers on a second board claim and consume (the load of
``tests/backends/redis/test_failover.py``), while the master of the board's slot is failed over twice: a graceful
``CLUSTER FAILOVER`` on its replica and a SIGKILL (the killed master restarted, as the new master's
replica), in the seed's order (``FAILOVER_SEED`` replays one). Under ``durability=strict``: 0 acknowledged
posts lost, 0 consumes reported twice; the claimers resume within seconds (the longest time without a
consume is printed and bounded); both boards serve at the end. Each test runs on a board in one slot and on
a board spread over three partitions (``partitions=3``: one per master; partition 0's master is failed over,
or its slot migrated).
"""

from __future__ import annotations

import functools
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator

import anyio
import pytest

from jobboard_redis.cluster import key_slot
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread.layout import open_layout
from tests.backends.redis.test_failover import History
from tests.backends.redis.test_failover import under_load as load_while
from tests.support.rediscluster import RedisCluster

pytestmark = pytest.mark.timeout(180)
STALL_LIMIT = 20.0
"""Seconds the claimers may go without a consume (a SIGKILL's failover takes about 2 x cluster-node-timeout,
4 s, then the calls' backoff, at most 0.5 s); generous for a busy 2-core machine."""


class Stalls:
    """The longest time without a new consume, sampled every 50 ms."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.longest = 0.0

    async def watch(self, stop: anyio.Event) -> None:
        seen, since = len(self.history.consumed), time.monotonic()
        while not stop.is_set():
            await anyio.sleep(0.05)
            now = time.monotonic()
            if len(self.history.consumed) != seen:
                seen, since = len(self.history.consumed), now
            self.longest = max(self.longest, now - since)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with RedisCluster() as started:
        yield started


def saying(cluster: RedisCluster, step: Callable[[], object]) -> Callable[[], str]:
    """``step``, then the line the cluster keeps of what it did."""
    def run() -> str:
        step()
        return cluster.failovers[-1]
    return run


def board_url(cluster: RedisCluster, root: str, partitions: int) -> str:
    return cluster.url(root, durability="strict", session_timeout=5, connect_timeout=20, partitions=partitions)


async def slot_of(cluster: RedisCluster, root: str, partitions: int) -> int:
    """The slot to fail over or migrate: the board's, or its partition 0's (the layout made here, first)."""
    if partitions == 1:
        return key_slot(f"{{{root}}}")
    layout = await open_layout(parse_redis_url(board_url(cluster, root, partitions)))
    return key_slot(f"{{{layout.roots[0]}}}")


async def under_load(cluster: RedisCluster, root: str, steps: list[tuple[float, Callable[[], object]]],
                     partitions: int) -> tuple[History, Stalls]:
    """Run the load on board ``root`` of ``cluster`` while each step runs (in a thread) after its pause; then
    drain it, check that both boards serve, and return what the clients were told."""
    history = History()
    stalls = Stalls(history)
    url = board_url(cluster, root, partitions)
    with anyio.fail_after(150):
        await load_while(url, history, [(pause, saying(cluster, step)) for pause, step in steps], stalls.watch)
    return history, stalls


def exactly_once(history: History, stalls: Stalls, what: str, *, minimum: int = 100) -> None:
    """0 acknowledged posts lost, 0 consumes reported twice, the claimers never stalled long."""
    lost, twice = history.tally(what, f", longest time without a consume {stalls.longest:.1f} s")
    assert len(history.acknowledged) >= minimum  # the load ran across the steps
    assert lost == [], f"acknowledged posts lost under durability=strict: {lost} ({history.stories(lost)})"
    assert twice == [], f"consumes reported twice under durability=strict: {twice} ({history.stories(twice)})"
    assert stalls.longest < STALL_LIMIT


SPREAD = pytest.mark.parametrize("partitions", [1, 3], ids=["one-slot", "spread"])
"""Each test on a board in one slot, and on one spread over three partitions (one per master)."""


@SPREAD
async def test_the_boards_master_failed_over_twice_under_load(cluster: RedisCluster, partitions: int) -> None:
    seed = int(os.environ.get("FAILOVER_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    steps = ["graceful", "kill"]
    rng.shuffle(steps)
    pauses = [rng.uniform(0.5, 1.5) for _ in steps]
    print(f"FAILOVER_SEED={seed} schedule={list(zip(pauses, steps, strict=True))}")
    root = f"cluster-load-{uuid.uuid4().hex}"
    slot = await slot_of(cluster, root, partitions)
    done = len(cluster.failovers)
    history, stalls = await under_load(cluster, root, [(pause, functools.partial(cluster.failover, slot, step))
                                                       for pause, step in zip(pauses, steps, strict=True)],
                                       partitions)
    assert len(cluster.failovers) == done + 2, cluster.failovers
    exactly_once(history, stalls, "cluster failovers")


@SPREAD
async def test_the_boards_slot_migrated_to_another_master_and_back_under_load(cluster: RedisCluster,
                                                                             partitions: int) -> None:
    """While the slot migrates, the board's calls are answered ``ASK`` (its prefix key is on neither node) and
    wait; once it has moved, ``MOVED`` sends them to the new master (which lacks the board's function: loaded)."""
    root = f"cluster-load-{uuid.uuid4().hex}"
    slot = await slot_of(cluster, root, partitions)
    home = cluster.master_of(slot)
    other = next(cluster.by_port(port) for port in sorted(cluster._master_ports()) if port != home.port)
    asked, moved = cluster.error_replies("ASK"), cluster.error_replies("MOVED")
    done = len(cluster.failovers)
    history, stalls = await under_load(cluster, root, [(1.5, lambda: cluster.migrate(slot, other)),
                                                       (1.5, lambda: cluster.migrate(slot, home))], partitions)
    assert len(cluster.failovers) == done + 2, cluster.failovers  # both migrations ran under the load
    assert cluster.master_of(slot) is home
    print(f"replies during the migrations: {cluster.error_replies('ASK') - asked} ASK, "
          f"{cluster.error_replies('MOVED') - moved} MOVED")
    exactly_once(history, stalls, "slot migrations", minimum=50)
