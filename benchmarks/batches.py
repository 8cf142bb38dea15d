"""Batched and fused rates of a board: posts (one by one, 16 in flight, and ``post_many``), the
claim -> consume cycle with ``consume`` then ``claim_next``, and with ``consume_and_claim_next``.

    python -m benchmarks.batches --url redis://127.0.0.1:6379/0/bench [--jobs 4000] [--workers 16]

Prints one JSON line (medians of --repeat runs, each on a fresh board), with this process's CPU
time per job of each phase in microseconds (``*_cpu_us``: the client's cost, whatever the server's).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.callgrind import counting
from benchmarks.common import print_json_of, process_cpu_seconds
from benchmarks.cycle import run_url
from jobboard import JobBoard, NewJob, open_board


async def posts(board: JobBoard, jobs: int, workers: int) -> float:
    started = time.perf_counter()
    per_worker = jobs // workers

    async def post() -> None:
        for _ in range(per_worker):
            await board.post("j", {"n": 1})

    await asyncio.gather(*(post() for _ in range(workers)))
    return per_worker * workers / (time.perf_counter() - started)


async def posts_many(board: JobBoard, jobs: int, batch: int) -> float:
    started = time.perf_counter()
    for _ in range(jobs // batch):
        await board.post_many([NewJob("j", {"n": 1})] * batch)
    return (jobs // batch) * batch / (time.perf_counter() - started)


async def cycles(board: JobBoard, workers: int, *, fused: bool) -> float:
    done = 0
    started = time.perf_counter()

    async def work(owner: str) -> None:
        nonlocal done
        claim = await board.claim_next(owner)
        while claim is not None:
            done += 1
            if fused:
                claim = await board.consume_and_claim_next(claim, None)
            else:
                await board.consume(claim, None)
                claim = await board.claim_next(owner)

    await asyncio.gather(*(work(f"w{index}") for index in range(workers)))
    return done / (time.perf_counter() - started)


async def one_run(url: str, jobs: int, workers: int, batch: int) -> dict[str, float]:
    found: dict[str, float] = {}
    async with open_board(run_url(url)) as board:
        phases = [("posts", lambda: posts(board, jobs, workers)), ("cycles", lambda: cycles(board, workers, fused=False)),
                  ("post_many", lambda: posts_many(board, jobs, batch)),
                  ("fused_cycles", lambda: cycles(board, workers, fused=True))]
        for name, phase in phases:
            cpu = process_cpu_seconds()
            with counting(name):  # a phase's instructions, under benchmarks.instructions (else nothing)
                found[f"{name}_per_s"] = await phase()
            found[f"{name}_cpu_us"] = 1e6 * (process_cpu_seconds() - cpu) / jobs
    return {key: round(value, 1 if key.endswith("_cpu_us") else None) for key, value in found.items()}


def main(url: str, jobs: int, workers: int, batch: int, repeat: int) -> dict[str, Any]:
    runs = [asyncio.run(one_run(url, jobs, workers, batch)) for _ in range(repeat)]
    median: dict[str, Any] = {key: sorted(run[key] for run in runs)[len(runs) // 2] for key in runs[0]}
    return {"bench": "batches", "url": url.partition("?")[0], "jobs": jobs, "workers": workers, "batch": batch,
            "runs": runs, "median": median}


if __name__ == "__main__":
    print_json_of("batches", main, jobs=4000, workers=16, batch=100, repeat=3)
