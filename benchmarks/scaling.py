"""Does the claim path hold up as the backlog grows?

For each backlog size B (1k, 10k, 50k jobs already on the board): the time for a
new board to open and list them, the worker's memory with them listed (RSS
above the same process before opening the board), claim_next -> consume
throughput of W claimers over a fixed number of cycles, and ZooKeeper requests
per cycle.

    python -m benchmarks.scaling --hosts 127.0.0.1:2181 --backlogs 1000,10000,50000 --cycles 500 --workers 16
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import uuid
from typing import Any

import anyio

from benchmarks.common import Stopwatch, median_of, process_cpu_seconds, rss_mib
from benchmarks.cycle import post_jobs, requests_sent
from jobboard import open_board


async def _open_and_measure(url: str) -> tuple[float, float]:
    gc.collect()
    before = rss_mib()
    watch = Stopwatch()
    async with open_board(url):
        seconds = watch.elapsed()
        gc.collect()
        return seconds, rss_mib() - before


def _child(url: str, queue: Any) -> None:
    queue.put(anyio.run(_open_and_measure, url))


def measure_open_in_child(url: str) -> tuple[float, float]:
    """Open a board in a fresh process: seconds to open and list, RSS it added (MiB)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(url, queue))
    child.start()
    result: tuple[float, float] = queue.get(timeout=120)
    child.join()
    return result


async def one_backlog(base: str, backlog: int, cycles: int, workers: int) -> dict[str, Any]:
    url = f"{base.rstrip('/')}/{uuid.uuid4().hex[:8]}"
    async with open_board(url) as producer:
        posts_per_s = await post_jobs(producer, backlog)
    open_seconds, rss_listed = await anyio.to_thread.run_sync(measure_open_in_child, url)
    async with open_board(url) as board:
        requests, cpu, done = requests_sent(board), process_cpu_seconds(), [0]
        watch = Stopwatch()

        async def claimer(index: int) -> None:
            while done[0] < cycles:
                claim = await board.claim_next(f"c{index}")
                if claim is None:
                    return
                await board.consume(claim)
                done[0] += 1

        async with anyio.create_task_group() as group:
            for index in range(workers):
                group.start_soon(claimer, index)
        seconds = watch.elapsed()
        return {"backlog": backlog, "posts_per_s": round(posts_per_s, 1), "open_and_list_s": round(open_seconds, 3),
                "rss_listed_mib": round(rss_listed, 1), "cycles_per_s": round(done[0] / seconds, 1),
                "zk_requests_per_cycle": round((requests_sent(board) - requests) / max(done[0], 1), 2),
                "cpu_s": round(process_cpu_seconds() - cpu, 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="127.0.0.1:2181")
    parser.add_argument("--backlogs", default="1000,10000,50000")
    parser.add_argument("--cycles", type=int, default=500, help="at most half the smallest backlog")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="ignored (the backlogs set the sizes)")
    args = parser.parse_args(argv)
    base = f"zookeeper://{args.hosts}/bench/scaling"
    results: list[dict[str, Any]] = []
    for backlog in (int(size) for size in args.backlogs.split(",")):
        runs = [asyncio.run(one_backlog(base, backlog, args.cycles, args.workers)) for _ in range(args.repeat)]
        results.append({"backlog": backlog, "runs": runs, "median": median_of(runs)})
    first, last = results[0]["median"], results[-1]["median"]
    report = {"bench": "scaling", "system": "jobboard", "workers": args.workers, "cycles": args.cycles,
              "repeat": args.repeat, "results": results,
              "throughput_ratio_largest_to_smallest": round(last["cycles_per_s"] / first["cycles_per_s"], 3)}
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
