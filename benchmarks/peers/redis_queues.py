"""Claim-cycle throughput of Redis queues on the same server as ``redis://``: SAQ, arq (its default
0.5 s poll and a 10 ms poll) and OpenStack TaskFlow's ``RedisJobBoard``.

    python -m benchmarks.peers.redis_queues --system saq --url redis://127.0.0.1:6379 --jobs 2000 --workers 16

As ``benchmarks.cycle``: N no-op jobs are enqueued first, then W concurrent consumers run until the
queue is empty (SAQ and arq in burst mode; TaskFlow with W threads claiming from ``iterjobs``).
Prints one JSON line. SAQ 0.26 and arq 0.28 pin ``redis<6``, so run them from their own
virtualenv; TaskFlow runs beside jobboard.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit


async def noop(ctx: Any, **kwargs: Any) -> None:
    return None


async def saq_run(url: str, jobs: int, workers: int) -> tuple[float, float]:
    from saq import Queue, Worker

    queue = Queue.from_url(url, name=f"bench-{uuid.uuid4().hex[:8]}")
    await queue.connect()
    started = time.perf_counter()
    for _ in range(jobs):
        await queue.enqueue("noop")
    posted = time.perf_counter()
    worker = Worker(queue, functions=[("noop", noop)], concurrency=workers, burst=True, dequeue_timeout=0.05)
    await worker.start()
    finished = time.perf_counter()
    await queue.disconnect()
    return jobs / (posted - started), jobs / (finished - posted)


async def arq_run(url: str, jobs: int, workers: int, poll_delay: float) -> tuple[float, float]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    parts = urlsplit(url)
    settings = RedisSettings(host=parts.hostname or "127.0.0.1", port=parts.port or 6379)
    pool = await create_pool(settings)
    queue = f"bench:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    for _ in range(jobs):
        await pool.enqueue_job("noop", _queue_name=queue)
    posted = time.perf_counter()
    worker = Worker([func(noop, name="noop")], queue_name=queue, redis_pool=pool, burst=True, max_jobs=workers,
                    poll_delay=poll_delay, handle_signals=False, keep_result=0)
    await worker.async_run()
    finished = time.perf_counter()
    await pool.aclose()
    return jobs / (posted - started), jobs / (finished - posted)


def taskflow_run(url: str, jobs: int, workers: int) -> tuple[float, float]:
    from taskflow import exceptions as tf_exceptions
    from taskflow.jobs.backends.impl_redis import RedisJobBoard

    parts = urlsplit(url)
    board = RedisJobBoard(f"bench-{uuid.uuid4().hex[:8]}", {"host": parts.hostname, "port": parts.port})
    board.connect()
    started = time.perf_counter()
    for _ in range(jobs):
        board.post("noop", details={})
    posted = time.perf_counter()

    def claimer(who: str) -> None:
        while True:
            for job in board.iterjobs(only_unclaimed=True):
                try:
                    board.claim(job, who)
                    board.consume(job, who)
                    break
                except (tf_exceptions.UnclaimableJob, tf_exceptions.NotFound):
                    continue
            else:
                return

    threads = [threading.Thread(target=claimer, args=(f"w{index}",)) for index in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = time.perf_counter()
    board.close()
    return jobs / (posted - started), jobs / (finished - posted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=["saq", "arq", "arq-10ms", "taskflow"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        if args.system == "saq":
            posts, cycles = asyncio.run(saq_run(args.url, args.jobs, args.workers))
        elif args.system.startswith("arq"):
            delay = 0.01 if args.system == "arq-10ms" else 0.5
            posts, cycles = asyncio.run(arq_run(args.url, args.jobs, args.workers, delay))
        else:
            posts, cycles = taskflow_run(args.url, args.jobs, args.workers)
        runs.append({"posts_per_s": round(posts), "cycles_per_s": round(cycles)})
    median = {key: sorted(run[key] for run in runs)[len(runs) // 2] for key in runs[0]}
    print(json.dumps({"bench": "redis_queues", "system": args.system, "jobs": args.jobs, "workers": args.workers,
                      "runs": runs, "median": median}))


if __name__ == "__main__":
    main()
