"""A wide-and-deep plan (40 layers x 50 tasks, fan-in 3 = 2000 tasks) on W workers: tasks per second.

    python -m benchmarks.dag --hosts 127.0.0.1:2181 --workers 4 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from contextlib import AsyncExitStack
from typing import Any

from benchmarks.common import Stopwatch, median_of
from jobboard import open_board
from jobboard.plans.posting import post_plan
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers
from tests.support.plans import wide_and_deep_plan

handlers = Handlers()


@handlers.task("step")
async def step(layer: int, *inputs: int) -> int:
    return layer + sum(inputs) % 7


async def one_run(url: str, layers: int, width: int, workers: int, concurrency: int) -> dict[str, Any]:
    plan = wide_and_deep_plan(layers=layers, width=width)
    async with AsyncExitStack() as boards:
        board = await boards.enter_async_context(open_board(f"{url}/{uuid.uuid4().hex[:8]}"))
        watch = Stopwatch()
        handle = await post_plan(board, plan)
        posted = watch.elapsed()
        running = [Worker(await boards.enter_async_context(open_board(board.url)), handlers,
                          WorkerConfig(concurrency=concurrency)) for _ in range(workers)]
        outcome = await handle.run_on(running)
        total = watch.elapsed()
    assert outcome.state == "complete", outcome.state
    tasks = len(plan.tasks)
    return {"tasks": tasks, "post_s": round(posted, 2), "run_s": round(total - posted, 2),
            "tasks_per_s": round(tasks / (total - posted), 1), "tasks_per_s_with_posting": round(tasks / total, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="127.0.0.1:2181")
    parser.add_argument("--url", default=None, help="board URL instead of --hosts (e.g. memory://dag)")
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8, help="jobs in flight per worker")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="ignored (layers x width set the size)")
    args = parser.parse_args(argv)
    url = args.url or f"zookeeper://{args.hosts}/bench/dag"
    runs = [asyncio.run(one_run(url, args.layers, args.width, args.workers, args.concurrency))
            for _ in range(args.repeat)]
    report = {"bench": "dag", "system": "jobboard", "backend": url.split(":")[0], "workers": args.workers,
              "layers": args.layers, "width": args.width, "concurrency": args.concurrency, "repeat": args.repeat,
              "runs": runs, "median": median_of(runs)}
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
