"""postgresql:// beside a PostgreSQL queue peer, same server, same run: pgqueuer (asyncpg), through its API.

    pip install pgqueuer==1.6.0
    python -m benchmarks.postgresql_peers --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 3000 --runs 3

Each round, alternating which goes first: jobboard posts N jobs with ``post_many`` (batches of 1,000) and
16 claimers run ``claim_next`` -> ``consume_and_claim_next`` until the board is empty; pgqueuer enqueues N
jobs with one batched ``Queries.enqueue`` and a ``QueueManager`` with a no-op entrypoint runs with
``max_concurrent_tasks=16`` and ``batch_size=8`` (it wants at least twice the batch in flight) in ``drain`` mode until the queue
is empty. Prints one JSON object: per system, the batched-post rate and the full-cycle rate (median and
runs). procrastinate, oban-py and SAQ's postgres mode are not in it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import asyncpg

from benchmarks.postgresql_cycle import board_cycle


async def pgqueuer_cycle(url: str, jobs: int, workers: int) -> dict[str, float]:
    from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    connection = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(connection))
        if not await connection.fetchval("SELECT to_regclass('pgqueuer') IS NOT NULL"):
            await queries.install()
        await connection.execute("TRUNCATE pgqueuer")
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            count = min(jobs, start + 1000) - start
            await queries.enqueue(["cycle"] * count, [None] * count, [0] * count)
        posts = jobs / (time.perf_counter() - started)
        manager = QueueManager(queries)

        @manager.entrypoint("cycle")
        async def cycle(job: Job) -> None:
            return None

        started = time.perf_counter()
        await manager.run(mode=QueueExecutionMode.drain, batch_size=max(1, workers // 2), max_concurrent_tasks=workers)
        return {"post_many_per_s": posts, "cycles_per_s": jobs / (time.perf_counter() - started)}
    finally:
        await connection.close()


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {key: {"median": round(statistics.median(r[key] for r in runs), 1), "runs": [round(r[key], 1) for r in runs]}
            for key in runs[0]}


async def main(url: str, jobs: int, workers: int, rounds: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"jobboard": [], "pgqueuer": []}
    for number in range(rounds):
        order = ["jobboard", "pgqueuer"] if number % 2 == 0 else ["pgqueuer", "jobboard"]
        for name in order:
            run = board_cycle if name == "jobboard" else pgqueuer_cycle
            results[name].append(await run(url, jobs, workers))
    return {"jobs": jobs, "workers": workers, **{name: summary(runs) for name, runs in results.items()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgresql_peers")
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.url, args.jobs, args.workers, args.runs))))
