"""Cost per claim as the backlog grows, and post -> ``wait()`` wake-up latency, on any board URL.

    python -m benchmarks.backlog --url redis://127.0.0.1:6379/0/bench --backlogs 1000,10000,100000

For each backlog B (posted with ``post_many``): W claimers run ``claim_next`` -> ``consume`` for
``--cycles`` cycles; then, on an empty board, one board waits (``wait()``) while another posts,
``--samples`` times: the time from the post's start to the waiter's return. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from benchmarks.cycle import run_url
from jobboard import JobBoard, NewJob, open_board


async def cycles(board: JobBoard, count: int, workers: int) -> float:
    left, done = count, 0

    async def work(owner: str) -> None:
        nonlocal left, done
        while left > 0:
            left -= 1
            claim = await board.claim_next(owner)
            if claim is None:
                return
            await board.consume(claim)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(work(f"w{index}") for index in range(workers)))
    return done / (time.perf_counter() - started)


async def backlog_run(url: str, backlog: int, count: int, workers: int) -> dict[str, Any]:
    async with open_board(run_url(url)) as board:
        for start in range(0, backlog, 1000):
            await board.post_many([NewJob("j", {"i": index}) for index in range(start, min(backlog, start + 1000))])
        rate = await cycles(board, count, workers)
    return {"backlog": backlog, "cycles_per_s": round(rate), "us_per_cycle": round(1e6 / rate, 1)}


async def wake_up(url: str, samples: int) -> dict[str, float]:
    latencies = []
    board_url = run_url(url)
    async with open_board(board_url) as waiter, open_board(board_url) as poster:
        for _ in range(samples):
            ready = asyncio.get_running_loop().create_task(waiter.wait())
            await asyncio.sleep(0.02)
            started = time.perf_counter()
            job = await poster.post("ping")
            await ready
            latencies.append((time.perf_counter() - started) * 1000)
            await poster.consume(await poster.claim(job, "p"))
    latencies.sort()
    return {"wake_up_p50_ms": round(statistics.median(latencies), 3),
            "wake_up_p90_ms": round(latencies[int(len(latencies) * 0.9)], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--backlogs", default="1000,10000,100000")
    parser.add_argument("--cycles", type=int, default=1000, help="at most the smallest backlog")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    runs = [asyncio.run(backlog_run(args.url, int(size), args.cycles, args.workers))
            for size in args.backlogs.split(",")]
    report = {"bench": "backlog", "url": args.url.partition("?")[0], "workers": args.workers,
              "cycles": args.cycles, "backlogs": runs, **asyncio.run(wake_up(args.url, args.samples))}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
