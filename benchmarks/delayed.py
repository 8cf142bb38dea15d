"""Due-time lateness of delayed posts: how long after its ``not_before`` a delayed job is claimed.

    python -m tests.support.zkserver run -- python -m tests.support.redisserver run -- \\
        python -m benchmarks.delayed [--jobs 200] [--rounds 3]

Each round, on each backend in turn (interleaved: memory, zookeeper, redis, then again): one
board posts ``--jobs`` jobs due 10 ms apart (``post_many`` with ``not_before``), a second board
waits (``wait()``, no polling) and claims each as soon as it is due. The lateness of a job is the
wall-clock time of its claim minus its due time. Prints one JSON line per backend (median, p99,
max in milliseconds over every round) plus the early claims (must be 0). ZooKeeper and Redis
come from ``JOBBOARD_ZK_HOSTS`` / ``JOBBOARD_REDIS_URL`` (set by the wrappers above).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

from benchmarks.common import percentile
from jobboard import NewJob, open_board

SPACING = 0.01
LEAD = 1.0
"""Seconds between the post and the first due time (posting 200 jobs must fit in it)."""


def urls() -> dict[str, str]:
    found = {"memory": "memory://delayed-{}"}
    if os.environ.get("JOBBOARD_ZK_HOSTS"):
        found["zookeeper"] = f"zookeeper://{os.environ['JOBBOARD_ZK_HOSTS']}/bench-delayed/{{}}"
    if os.environ.get("JOBBOARD_REDIS_URL"):
        found["redis"] = f"{os.environ['JOBBOARD_REDIS_URL']}/0/bench-delayed-{{}}"
    return found


async def one_round(url: str, jobs: int) -> tuple[list[float], int]:
    """Lateness (seconds) of every job of one round, and how many were claimed before they were due."""
    async with open_board(url) as poster, open_board(url) as claimer:
        start = time.time() + LEAD + jobs * 0.002
        posted = await poster.post_many([NewJob("due", not_before=start + i * SPACING) for i in range(jobs)])
        due = {job.id: start + i * SPACING for i, job in enumerate(posted)}
        lateness, early = [], 0
        while len(lateness) < jobs:
            await claimer.wait()
            while (claim := await claimer.claim_next("bench")) is not None:
                late = time.time() - due[claim.job.id]
                early += late < 0
                lateness.append(late)
                await claimer.consume(claim)
        return lateness, early


async def main(jobs: int, rounds: int) -> None:
    results: dict[str, list[float]] = {}
    early: dict[str, int] = {}
    for _ in range(rounds):
        for name, pattern in urls().items():
            lateness, too_early = await one_round(pattern.format(uuid.uuid4().hex), jobs)
            results.setdefault(name, []).extend(lateness)
            early[name] = early.get(name, 0) + too_early
    for name, values in results.items():
        ordered = sorted(values)
        print(json.dumps({
            "backend": name, "jobs": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(percentile(ordered, 99) * 1000, 2), "max_ms": round(ordered[-1] * 1000, 2),
            "claimed_early": early[name],
        }))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.jobs, arguments.rounds))
