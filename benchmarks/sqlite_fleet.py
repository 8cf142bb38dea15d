"""sqlite://: W claimers in one process against the same W split over P processes, interleaved rounds, with
where the time goes (one JSON line).

    python -m benchmarks.sqlite_fleet --rounds 3 --jobs 4000 --workers 16 --processes 1 4

Each run posts ``--jobs`` jobs on a fresh file, then starts the claiming processes (spawned, W/P claimers each,
the phase of ``benchmarks.cycle``: ``claim_next`` -> ``consume``), waits until every board is open, and times
from the go to the last consume. Per run: cycles/s, and per cycle, summed over the processes: write
transactions, transactions run on the board's thread, blocking waits for the file's write turn (and the
milliseconds spent in them), the milliseconds from a waiter's turn to its event loop running the queue
(``grant_delay``) and the turn held, turns taken (hand-overs), busy retries, context switches (voluntary
and not) and CPU milliseconds. Each round runs every process count once; the report gives per process count
the median and range of each figure, and per round the ratio of each fleet to one process.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from typing import Any

import anyio

from benchmarks.cycle import Tally, drain, post_jobs
from jobboard import open_board

COUNTERS = ("writes", "thread_calls", "turn_waits", "turn_wait_s", "grant_delay_s", "held_s", "turns", "queued",
            "busy_retries")


def _usage() -> tuple[float, int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw


async def _claim(url: str, workers: int, queue: Any, go: Any, tally: Tally) -> dict[str, float]:
    async with open_board(url) as board:
        db = board.backend.db  # type: ignore[attr-defined]

        def read(key: str) -> float:
            return float(getattr(getattr(db, "calls", db), key, getattr(db, key, "nan")))  # nan: not counted

        queue.put("ready")
        await anyio.to_thread.run_sync(go.wait)
        before = {key: read(key) for key in COUNTERS}
        cpu, voluntary, involuntary = _usage()
        async with anyio.create_task_group() as group:
            for index in range(workers):
                group.start_soon(drain, board, f"c{index}", [], None, tally)
        after = _usage()
        found = {key: read(key) - value for key, value in before.items()}
    found.update(cpu_s=after[0] - cpu, voluntary=after[1] - voluntary, involuntary=after[2] - involuntary)
    return found


def _child(url: str, workers: int, queue: Any, go: Any, total: int, shared: tuple[Any, Any]) -> None:
    queue.put(anyio.run(_claim, url, workers, queue, go, Tally(total, shared)))


async def one_run(directory: str, run: int, jobs: int, workers: int, processes: int) -> dict[str, float]:
    url = f"sqlite://{directory}/run{run}.db?board=fleet"
    async with open_board(url) as producer:
        await post_jobs(producer, jobs)
    context = multiprocessing.get_context("spawn")
    queue, go = context.Queue(), context.Event()
    shared = (context.Value("i", 0), context.Value("d", 0.0))
    children = [context.Process(target=_child, args=(url, workers // processes, queue, go, jobs, shared))
                for _ in range(processes)]
    for child in children:
        child.start()
    for _ in children:
        await anyio.to_thread.run_sync(queue.get, True, 120)  # a child that died: queue.Empty, not a hang
    await anyio.sleep(0.5)
    started = time.time()
    go.set()
    parts = [await anyio.to_thread.run_sync(queue.get, True, 600) for _ in children]
    for child in children:
        await anyio.to_thread.run_sync(child.join)
    cycles = float(shared[0].value)
    summed = {key: sum(part[key] for part in parts) for key in parts[0]}
    seconds = ("turn_wait_s", "grant_delay_s", "held_s", "cpu_s")
    per_cycle = {f"{key}_per_cycle": round(value / cycles, 3) for key, value in summed.items() if key not in seconds}
    for key in seconds[:-1]:
        per_cycle[f"{key[:-2]}_ms_per_cycle"] = round(1000 * summed[key] / cycles, 3)
    counted = {key: value for key, value in per_cycle.items() if not math.isnan(value)}  # what the tree counts
    return {"cycles_per_s": round(cycles / (shared[1].value - started), 1), **counted,
            "cpu_ms_per_cycle": round(1000 * summed["cpu_s"] / cycles, 3)}


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {key: {"median": round(statistics.median(run[key] for run in runs), 3),
                  "range": [min(run[key] for run in runs), max(run[key] for run in runs)]} for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {p: [] for p in args.processes}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as directory:
        run = 0
        for _ in range(args.rounds):
            for processes in args.processes:
                run += 1
                results[processes].append(anyio.run(one_run, directory, run, args.jobs, args.workers, processes))
            load.append(os.getloadavg()[0])
    first = args.processes[0]
    ratios = {p: [round(r["cycles_per_s"] / base["cycles_per_s"], 2) for r, base in zip(results[p], results[first], strict=True)]
              for p in args.processes[1:]}
    print(json.dumps({"benchmark": "sqlite_fleet", "rounds": args.rounds, "jobs": args.jobs, "workers": args.workers,
                      "load": [round(value, 2) for value in load],
                      "results": {str(p): summary(runs) for p, runs in results.items()},
                      "ratios": {str(p): {"per_round": values, "median": statistics.median(values)}
                                 for p, values in ratios.items()}}))


if __name__ == "__main__":
    main()
