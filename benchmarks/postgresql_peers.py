"""postgresql:// beside the Python PostgreSQL queues, same server, same run: pgqueuer, procrastinate, SAQ.

    pip install pgqueuer==1.6.0 procrastinate==3.10.0 'saq[postgres]==0.26.4'
    python -m benchmarks.postgresql_peers --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 2000 --runs 3

Each round runs every system once per measure, the systems' order rotating from round to round:

- full cycle at each ``--workers`` W (1, 16, 64): the system's bulk post of N jobs (batches of 1,000:
  jobboard ``post_many``, pgqueuer ``Queries.enqueue`` with lists, procrastinate ``batch_defer_async``;
  SAQ has none), then its worker with W concurrent jobs runs them all (jobboard: W claimers
  ``claim_next`` -> ``consume_and_claim_next``; pgqueuer ``QueueManager`` in drain mode, batch W/2;
  procrastinate ``run_worker_async(concurrency=W, wait=False)``; SAQ ``Worker(concurrency=W, burst=True)``);
- posts: 16 tasks posting one job at a time;
- wake: ms from a post to the job running in an idle worker (jobboard: a claimer in ``wait()`` holding
  its claim), median of 20.

Prints one JSON object: per system and measure, the median and every round's figure. oban-py is not in
it: every release on PyPI needs Python >= 3.12 (this machine has 3.11).
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
from typing import Any

from benchmarks.common import print_json_of
from benchmarks.postgresql_cycle import board_cycle, fresh, posts
from benchmarks.postgresql_peer_queues import PEERS, Result, wake_latency
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
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


SYSTEMS = {"jobboard": (jobboard_cycle, posts, jobboard_wake), **PEERS}


def summary(values: list[float | None]) -> dict[str, Any] | None:
    if any(value is None for value in values):
        return None
    numbers = [float(value) for value in values if value is not None]
    return {"median": round(statistics.median(numbers), 1), "runs": [round(value, 1) for value in numbers]}


async def main(url: str, jobs: int, workers: str, runs: int, only: str) -> dict[str, Any]:
    """``runs`` rounds of every system (``only``: comma-separated names, or all) at each W of ``workers``."""
    logging.basicConfig(level=logging.WARNING)
    chosen = [name for name in only.split(",") if name]
    names = [name for name in SYSTEMS if not chosen or name in chosen]
    concurrencies = [int(w) for w in workers.split(",")]
    figures: dict[str, dict[str, list[float | None]]] = {name: {} for name in names}
    for number in range(runs):
        order = names[number % len(names):] + names[:number % len(names)]
        for name in order:
            cycle, post, wake = SYSTEMS[name]
            for w in concurrencies:
                result = await cycle(url, jobs, w)
                figures[name].setdefault(f"cycles_per_s_w{w}", []).append(result["cycles_per_s"])
                figures[name].setdefault(f"post_many_per_s_w{w}", []).append(result["post_many_per_s"])
            figures[name].setdefault("posts_per_s", []).append(await post(url, jobs, 16))
            figures[name].setdefault("wake_ms", []).append(await wake(url, 20))
            print(json.dumps({"round": number, "system": name,
                              **{k: v[-1] for k, v in figures[name].items()}}), flush=True)
    return {"jobs": jobs, "workers": concurrencies, "rounds": runs,
            **{name: {key: summary(values) for key, values in measures.items()} for name, measures in figures.items()}}


if __name__ == "__main__":
    print_json_of("postgresql_peers", main, jobs=2000, workers="1,16,64", runs=3, only="")
