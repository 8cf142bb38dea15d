"""redis:// on a Redis Cluster: one shard's master FROZEN (SIGSTOP) while boards hold claims on it.

A frozen master keeps its connections open and answers nothing; the cluster fails over to its replica after
about twice ``cluster-node-timeout`` (2 s here: ~4 s). The boards must notice within a reply timeout well
under the session timeout, find the promoted replica without waiting on the frozen node, and renew their
sessions in time: no session lost, no job run twice, when the failover completes within the session timeout.

On a fresh 3-master cluster (each with a replica), board A holds claims in one partition (its home on a board
spread over three, or the one slot of a ``cluster=1`` board) with ``session_timeout=10`` (the default), and
board B (another session) tries ``claim_next`` throughout; the master of that slot is SIGSTOPped, the cluster
promotes its replica, and after ``session_timeout`` + 1.5 s: A's claims must all still hold (``watch_claim``
did not return, each ``consume`` accepted), B must not have claimed any of them (run twice), and B must claim
the free jobs of that slot again within a bound. Then SIGCONT: the old master comes back as a replica, and
both boards still serve. The one-slot board runs with ``JOBBOARD_SPREAD_FAILOVER=1`` (the suite runs the
spread board, ~20 s).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

from jobboard import open_board
from jobboard.backend import Claim
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost
from jobboard_redis.board import RedisBackend
from jobboard_redis.cluster import key_slot
from jobboard_redis.spread import SpreadBackend
from tests.support.failover import synchronised, until
from tests.support.rediscluster import RedisCluster

pytestmark = pytest.mark.timeout(120)
SESSION_TIMEOUT = 10.0
HELD = 4
"""Jobs A claims and holds across the freeze."""
FREE = 3
"""Jobs left for B in the frozen slot."""
BACK_WITHIN = 9.0
"""Seconds from the SIGSTOP until B claims in the frozen slot again: the cluster's failover (~4 s) plus a
reply timeout and the calls' backoff; under the session timeout (generous for a busy 2-core machine)."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with RedisCluster(appendfsync="everysec") as started:
        yield started


def the_part(board: JobBoard) -> RedisBackend:
    """The partition A's claims are in: its home (spread board), or the board itself (one slot)."""
    backend = board.backend
    if isinstance(backend, SpreadBackend):
        return backend.parts[backend.home]
    assert isinstance(backend, RedisBackend)
    return backend


class Watch:
    """What board B saw while it tried ``claim_next`` throughout: the jobs it claimed, and when."""

    def __init__(self, b: JobBoard) -> None:
        self.b = b
        self.claimed: dict[str, float] = {}
        self.failures = 0

    async def claim_throughout(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            try:
                claim = await self.b.claim_next("b")
            except BackendUnavailable:
                self.failures += 1
                claim = None
            if claim is not None:
                self.claimed.setdefault(claim.job.id, time.monotonic())
            else:
                await anyio.sleep(0.05)


async def frozen_master_under_claims(cluster: RedisCluster, partitions: int) -> None:
    url = cluster.url(f"frozen-{uuid.uuid4().hex}", partitions=partitions, session_timeout=SESSION_TIMEOUT)
    async with open_board(url) as a, open_board(url) as b:
        part = the_part(a)
        jobs = [await a.post("x") for _ in range(HELD + FREE)]  # plain posts: A's home partition
        claims: list[Claim] = [await a.claim(job, "a") for job in jobs[:HELD]]
        free = {job.id for job in jobs[HELD:]}
        lost: dict[str, str] = {}

        async def watch(claim: Claim) -> None:
            lost[claim.job.id] = await a.watch_claim(claim)

        master = cluster.master_of(key_slot(part.options.prefix))
        replica = cluster.replica_of(master)
        watch_b = Watch(b)
        stop = anyio.Event()
        async with anyio.create_task_group() as tasks:
            for claim in claims:
                tasks.start_soon(watch, claim)
            await anyio.sleep(0.2)
            frozen = time.monotonic()
            master.signal(signal.SIGSTOP)
            try:
                tasks.start_soon(watch_b.claim_throughout, stop)
                await anyio.to_thread.run_sync(lambda: until(lambda: replica.role() == "master",
                                                             "the frozen master's replica promoted", 30))
                promoted = time.monotonic() - frozen
                await anyio.sleep(max(0.0, frozen + SESSION_TIMEOUT + 1.5 - time.monotonic()))
                stop.set()
                said = dict(lost)  # what watch_claim said before A's consumes (each then returns "consumed")
                consumed = 0
                for claim in claims:
                    try:
                        await a.consume(claim)
                        consumed += 1
                    except ClaimLost:
                        pass
            finally:
                master.signal(signal.SIGCONT)
            tasks.cancel_scope.cancel()
        twice = sorted(set(watch_b.claimed) & {claim.job.id for claim in claims})
        back = min((at - frozen for job, at in watch_b.claimed.items() if job in free), default=float("inf"))
        print(f"frozen master {master.port}, replica {replica.port} promoted after {promoted:.1f} s; "
              f"B claimed again after {back:.1f} s ({watch_b.failures} claim calls failed); "
              f"claims lost {len(said)} of {HELD} ({sorted(set(said.values()))}); consumed {consumed}; "
              f"run twice {len(twice)}")
        await anyio.to_thread.run_sync(lambda: until(lambda: master.role() == "slave" and synchronised(master.port),
                                                     "the old master back as a replica", 30))
        await anyio.to_thread.run_sync(lambda: until(cluster.settled, "the cluster settled after SIGCONT", 30))
        assert said == {}, f"claims declared lost across a frozen master failed over in {promoted:.1f} s: {said}"
        assert consumed == HELD
        assert twice == [], f"jobs claimed by B while A held them: {twice}"
        assert back < BACK_WITHIN, f"B claimed in the frozen slot again only after {back:.1f} s"
        with anyio.fail_after(30):  # both boards serve with the old master back as a replica
            job = await b.post("y")
            claim = await a.claim(job, "a")
            await a.consume(claim)
            left = [await b.claim_next("b") for _ in range(FREE + 1)]
            assert {claim.job.id for claim in left if claim is not None} <= free


async def test_a_frozen_master_of_a_spread_boards_partition_costs_no_session(cluster: RedisCluster) -> None:
    with anyio.fail_after(90):
        await frozen_master_under_claims(cluster, partitions=3)


@pytest.mark.skipif(not os.environ.get("JOBBOARD_SPREAD_FAILOVER"),
                    reason="JOBBOARD_SPREAD_FAILOVER=1 runs it (~20 s); the suite runs the spread board's")
async def test_a_frozen_master_of_a_one_slot_board_costs_no_session(cluster: RedisCluster) -> None:
    with anyio.fail_after(90):
        await frozen_master_under_claims(cluster, partitions=1)
