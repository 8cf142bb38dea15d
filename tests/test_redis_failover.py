"""redis:// through Sentinel: the primary is SIGKILLed under load and a replica takes over.

Redis replicates asynchronously, so a failover may lose acknowledged writes
(docs/backends/redis.md, "Durability"): this test counts what was lost and
what ran twice, and checks that the board goes on on the new primary.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import anyio
import pytest
import redis

from jobboard import JobBoard, open_board
from tests.support.redisserver import RedisSentinel, RedisServer

pytestmark = pytest.mark.timeout(120)
POSTS = 300
KILL_AT = 100


def wait_replicating(replica: RedisServer, timeout: float = 20.0) -> None:
    client = redis.Redis(host="127.0.0.1", port=replica.port)
    deadline = time.monotonic() + timeout
    while client.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never synchronised"
        time.sleep(0.05)
    client.close()


async def test_a_sentinel_failover_under_load_is_counted() -> None:
    with RedisServer() as primary, \
            RedisServer(extra=["--replicaof", "127.0.0.1", str(primary.port)]) as replica, \
            RedisSentinel(primary.port) as sentinel:
        wait_replicating(replica)
        url = (f"redis://127.0.0.1:{sentinel.port}/0/failover-{uuid.uuid4().hex}"
               f"?sentinel={sentinel.service}&session_timeout=10&connect_timeout=20")
        acknowledged: list[str] = []
        consumed: list[str] = []
        posting_done = anyio.Event()

        async def produce(board: JobBoard) -> None:
            for index in range(POSTS):
                acknowledged.append((await board.post("j", {"i": index}, key=f"k{index}")).id)
                if index == KILL_AT:
                    await anyio.to_thread.run_sync(primary.kill)
            posting_done.set()

        async def consume(board: JobBoard) -> None:
            while not posting_done.is_set() or await board.job_count():
                claim = await board.claim_next("w")
                if claim is None:
                    await anyio.sleep(0.01)
                    continue
                await board.consume(claim, "done")
                consumed.append(claim.job.id)

        with anyio.fail_after(90):
            async with open_board(url) as board:
                async with anyio.create_task_group() as group:
                    group.start_soon(produce, board)
                    group.start_soon(consume, board)
                assert await board.job_count() == 0
                after = await board.post("after the failover")
                await board.consume(await board.claim(after, "w"), "fine")
        promoted = redis.Redis(host="127.0.0.1", port=replica.port)
        assert promoted.info("replication")["role"] == "master"  # the failover did happen
        promoted.close()
        ran = Counter(consumed)
        lost = [job for job in acknowledged if job not in ran]
        twice = [job for job, count in ran.items() if count > 1]
        print(f"failover: {len(acknowledged)} posts acknowledged, {len(lost)} lost, {len(twice)} consumed twice")
        assert len(acknowledged) == POSTS  # every post was acknowledged, on one primary or the other
        assert len(lost) + len(twice) <= KILL_AT  # only writes around the kill can be affected
