"""postgresql:// beside the Python PostgreSQL queues, same server, same run: pgqueuer, procrastinate, SAQ.

    pip install pgqueuer==1.6.0 procrastinate==3.10.0 'saq[postgres]==0.26.4'
    python -m benchmarks.postgresql_peers --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 2000 --runs 3

Each round runs every system once per measure, the systems' order rotating from round to round:

- full cycle at each ``--workers`` W (1, 16, 64): the system's bulk post of N jobs (batches of 1,000:
  jobboard ``post_many``, pgqueuer ``Queries.enqueue`` with lists, procrastinate ``batch_defer_async``;
  SAQ has none), then its worker with W concurrent jobs runs them all (jobboard: W claimers
  ``claim_next`` -> ``consume_and_claim_next``; pgqueuer ``QueueManager`` in drain mode, batch W/2;
  procrastinate ``run_worker_async(concurrency=W, wait=False)``; SAQ ``Worker(concurrency=W)`` until every job ran, then stopped);
- posts: 16 tasks posting one job at a time;
- wake: ms from a post to the job running in an idle worker (jobboard: a claimer in ``wait()`` holding
  its claim), median of 20.

Every system's round runs in its own child process (``--one NAME``), killed with its process group after
``--limit`` seconds: a peer that hangs (SAQ's worker shutdown did, in round 2 of a run) costs that
system that round's figures, reported in ``failures``, and the run goes on. Prints one line per system
and round, then one JSON object: per system and measure, the median and every round's figure.
oban-py is not in it: every release on PyPI needs Python >= 3.12 (this machine has 3.11).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
from typing import Any

from benchmarks.postgresql_cycle import board_cycle, fresh, posts
from benchmarks.postgresql_peer_queues import PEERS, Result, bounded, wake_latency
from jobboard import open_board


async def jobboard_cycle(url: str, jobs: int, workers: int) -> Result:
    return dict(await board_cycle(url, jobs, workers))


async def jobboard_wake(url: str, samples: int) -> float:
    """Post on one board -> a claimer of another board, idle in ``wait()``, holds the claim."""
    board_url = fresh(url)
    ran = asyncio.Event()
    async with open_board(board_url) as poster, open_board(board_url) as worker:

        async def claimer() -> None:
            while True:
                claim = await worker.claim_next("w")
                if claim is None:
                    await worker.wait()
                    continue
                ran.set()
                await worker.consume(claim)

        task = asyncio.ensure_future(claimer())
        try:
            return await wake_latency(lambda: poster.post("w"), ran, samples)
        finally:
            await bounded(task, 5)


SYSTEMS = {"jobboard": (jobboard_cycle, posts, jobboard_wake), **PEERS}


async def one_round(name: str, url: str, jobs: int, concurrencies: list[int]) -> dict[str, float | None]:
    """Every measure of one system, once (what a ``--one`` child prints)."""
    cycle, post, wake = SYSTEMS[name]
    figures: dict[str, float | None] = {}
    for w in concurrencies:
        result = await cycle(url, jobs, w)
        figures[f"cycles_per_s_w{w}"] = result["cycles_per_s"]
        figures[f"post_many_per_s_w{w}"] = result["post_many_per_s"]
    figures["posts_per_s"] = await post(url, jobs, 16)
    figures["wake_ms"] = await wake(url, 20)
    return figures


def child(name: str, url: str, jobs: int, workers: str, limit: float) -> dict[str, Any]:
    """One system's round in a child process and its own process group, killed after ``limit`` seconds.

    Returns its figures, or ``{"failed": why}`` (timed out, or exited without its figures)."""
    command = [sys.executable, "-m", "benchmarks.postgresql_peers", "--url", url, "--jobs", str(jobs),
               "--workers", workers, "--one", name]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return {"failed": f"killed after {limit:.0f} s; stderr tail: {err.strip()[-300:]}"}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        return {"failed": f"exit {process.returncode}; stderr tail: {err.strip()[-300:]}"}
    return dict(json.loads(lines[-1]))


def summary(values: list[float | None]) -> dict[str, Any] | None:
    """Median and runs of the rounds that measured it (None: no round did)."""
    numbers = [float(value) for value in values if value is not None]
    if not numbers:
        return None
    return {"median": round(statistics.median(numbers), 1), "runs": [round(value, 1) for value in numbers]}


def main(url: str, jobs: int, workers: str, runs: int, only: str, limit: float) -> dict[str, Any]:
    """``runs`` rounds of every system (``only``: comma-separated names, or all) at each W of ``workers``."""
    chosen = [name for name in only.split(",") if name]
    names = [name for name in SYSTEMS if not chosen or name in chosen]
    concurrencies = [int(w) for w in workers.split(",")]
    figures: dict[str, dict[str, list[float | None]]] = {name: {} for name in names}
    failures: list[dict[str, Any]] = []
    for number in range(runs):
        order = names[number % len(names):] + names[:number % len(names)]
        for name in order:
            got = child(name, url, jobs, workers, limit)
            if "failed" in got:
                failures.append({"round": number, "system": name, "why": got["failed"]})
            for key, value in got.items():
                if key != "failed":
                    figures[name].setdefault(key, []).append(value)
            print(json.dumps({"round": number, "system": name, "load": os.getloadavg()[0], **got}), flush=True)
    return {"jobs": jobs, "workers": concurrencies, "rounds": runs, "failures": failures,
            **{name: {key: summary(values) for key, values in measures.items()} for name, measures in figures.items()}}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgresql_peers")
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", default="1,16,64")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated systems (default: all)")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds for one system's round")
    parser.add_argument("--one", help="run one system's round in this process and print its figures")
    return parser.parse_args()


if __name__ == "__main__":
    options = parse()
    if options.one:
        logging.basicConfig(level=logging.WARNING)
        concurrencies = [int(w) for w in options.workers.split(",")]
        print(json.dumps(asyncio.run(one_round(options.one, options.url, options.jobs, concurrencies))), flush=True)
    else:
        print(json.dumps(main(options.url, options.jobs, options.workers, options.runs, options.only, options.limit)))
