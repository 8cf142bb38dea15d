"""redis:// on a Redis Cluster: a HEALTHY master that stalls a little longer than the reply timeout (a fork, an
fsync stall, a loaded host), and no failover follows (review B, finding B4).

The connection that waited the reply timeout R for it marks the master silent, and the slot map passes it over
while it stays silent; a probe of it races the map's polls, so it is used again as soon as it answers: a stall S
in (R, 2R) costs about S, not 2R (before the probe: ~2R, and a session of 5 s was lost in 2 of 4 rounds).

Own 3-master cluster with ``cluster-node-timeout`` raised to 15 s, so that a 2.4-s stall fails nothing over; a
one-slot board with ``session_timeout=5`` (R = 2 s, a heartbeat every 1.7 s) holds a claim; its master is
SIGSTOPped 2.4 s, then SIGCONTed, in two rounds at two heartbeat phases. A ``state`` call made at the SIGSTOP must
be answered within the stall + 1 s, and the claim must hold (``watch_claim`` silent, the consume accepted) once
the session timeout has passed since the SIGSTOP.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import ClaimLost
from jobboard_redis.board import RedisBackend
from jobboard_redis.cluster import key_slot
from tests.support.rediscluster import RedisCluster, client

pytestmark = pytest.mark.timeout(90)
SESSION_TIMEOUT = 5.0
STALL = 2.4
"""Seconds the master is stopped: more than the reply timeout (2 s), less than twice it."""
PHASES = (0.3, 1.1)
"""Seconds from the claim's watch to the SIGSTOP, one per round: two phases of the 1.7-s heartbeat."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with RedisCluster(appendfsync="everysec") as started:
        for node in started.nodes:  # a 2.4-s stall fails nothing over (Redis's default node timeout)
            with client(node.port) as admin:
                admin.execute_command("CONFIG", "SET", "cluster-node-timeout", "15000")
        yield started


async def test_a_healthy_master_stalled_past_the_reply_timeout_is_used_again_when_it_answers(
        cluster: RedisCluster) -> None:
    url = cluster.url(f"stall-{uuid.uuid4().hex}", session_timeout=SESSION_TIMEOUT)
    answered: list[float] = []
    lost: list[str] = []
    with anyio.fail_after(60):
        async with open_board(url) as board:
            backend = board.backend
            assert isinstance(backend, RedisBackend) and backend.options.reply_wait == 2.0
            master = cluster.master_of(key_slot(backend.options.prefix))
            for phase in PHASES:
                job = await board.post("x")
                claim = await board.claim(job, "w")
                said: list[str] = []

                async def watch() -> None:
                    said.append(await board.watch_claim(claim))  # noqa: B023 (awaited within the round)

                async def ask(since: float) -> None:
                    await board.state(job)  # noqa: B023
                    answered.append(time.monotonic() - since)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(watch)
                    await anyio.sleep(phase)
                    stopped = time.monotonic()
                    master.signal(signal.SIGSTOP)
                    try:
                        tasks.start_soon(ask, stopped)
                        await anyio.sleep(STALL)
                    finally:
                        master.signal(signal.SIGCONT)
                    await anyio.sleep(max(0.0, stopped + SESSION_TIMEOUT + 0.5 - time.monotonic()))
                    tasks.cancel_scope.cancel()
                try:
                    await board.consume(claim)
                except ClaimLost as error:
                    lost.append(f"{phase}: {error} (watch_claim said {said})")
                print(f"phase {phase}: state answered {answered[-1] if answered else float('inf'):.2f} s after the "
                      f"SIGSTOP ({STALL} s stall); watch_claim said {said}")
            assert master.role() == "master", "the stalled master was failed over: not this test's case"
    assert lost == [], f"a {STALL}-s stall of a healthy master lost the session: {lost}"
    assert len(answered) == len(PHASES) and max(answered) < STALL + 1.0, (
        f"state answered {answered} s after the SIGSTOP of a {STALL}-s stall")
