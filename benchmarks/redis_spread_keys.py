"""What a post costs on a spread redis:// board, by kind of post (docs/backends/redis.md, "Idempotency keys
across partitions"): plain, keyed, keyed with a group of the key's partition, keyed with a group of another
partition, and the same keyed posts again (answered by the job already posted).

For each kind: wall time per post (sequential posts, one board), the board function's calls per post on the
masters (``INFO commandstats``: ``FCALL`` calls, exact) and their server time per post (its ``usec``), and the
client's CPU per post. Run it on a Redis Cluster (``JOBBOARD_TEST_REDIS_CLUSTER`` or ``--seeds``), e.g. under
``python -m tests.support.rediscluster run --``; put another tree first on ``PYTHONPATH`` to measure it.
Prints one JSON object: kind -> [wall us, calls, server us, client CPU us].
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable

import redis

from jobboard import open_board
from jobboard.job import Job
from jobboard_redis.cluster import crc16
from jobboard_redis.spread.flow import group_index

K = 3


def key_in(index: int, tag: str) -> str:
    """A key of ``tag`` whose record is in partition ``index``."""
    return next(f"{tag}-{n}" for n in range(100_000) if crc16(f"{tag}-{n}".encode()) % K == index)


def group_in(index: int) -> str:
    return next(f"g{n}" for n in range(1000) if group_index(f"g{n}", K) == index)


def board_calls(seeds: str) -> tuple[int, int]:
    """``FCALL`` calls and their microseconds so far, summed over the masters."""
    calls = usec = 0
    for seed in seeds.split(","):
        host, port = seed.rsplit(":", 1)
        server = redis.Redis(host=host, port=int(port))
        if server.info("replication")["role"] == "master":
            stats = server.info("commandstats").get("cmdstat_fcall", {})
            calls, usec = calls + int(stats.get("calls", 0)), usec + int(stats.get("usec", 0))
        server.close()
    return calls, usec


async def measure(seeds: str, posts: int) -> dict[str, list[float]]:
    url = f"redis://{seeds}/0/keybench-{uuid.uuid4().hex}?cluster=1&partitions={K}"
    run = uuid.uuid4().hex[:6]
    same = [key_in(1, f"s{n}{run}") for n in range(posts)]
    far = [key_in(1, f"f{n}{run}") for n in range(posts)]
    out: dict[str, list[float]] = {}
    async with open_board(url) as board:
        kinds: dict[str, Callable[[int], Awaitable[Job]]] = {
            "plain": lambda n: board.post("x"),
            "keyed": lambda n: board.post("x", key=f"k{n}{run}"),
            "keyed again": lambda n: board.post("x", key=f"k{n}{run}"),
            "keyed, group of its partition": lambda n: board.post("x", key=same[n], group=group_in(1)),
            "keyed, group of another partition": lambda n: board.post("x", key=far[n], group=group_in(2)),
            "the same again": lambda n: board.post("x", key=far[n], group=group_in(2)),
        }
        for kind, post in kinds.items():
            calls, usec = board_calls(seeds)
            cpu, wall = time.process_time(), time.perf_counter()
            for n in range(posts):
                await post(n)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            after_calls, after_usec = board_calls(seeds)
            out[kind] = [round(wall / posts * 1e6), round((after_calls - calls) / posts, 2),
                         round((after_usec - usec) / posts, 1), round(cpu / posts * 1e6)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=os.environ.get("JOBBOARD_TEST_REDIS_CLUSTER", ""))
    parser.add_argument("--posts", type=int, default=400)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.seeds, args.posts))))


if __name__ == "__main__":
    main()
