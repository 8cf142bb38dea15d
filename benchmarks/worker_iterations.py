"""Event-loop iterations and callbacks a worker process spends per job, by shape (issue 28: what a one-slot
process pays that a 16-slot one shares).

    python -m benchmarks.worker_iterations --jobs 2000 --shapes 16:0,1:16,16:16 --linger 0,0.002

One redis-server (AOF off), started here. For each shape ``SLOTS:PREFETCH`` and each ``linger``, in turn, in
this process: N jobs posted first, then one burst :class:`~jobboard.worker.conductor.Worker` runs them with a
no-op handler. Per job: the event loop's iterations (``_run_once`` calls: each an ``epoll_wait``), the callbacks
it ran (task steps, future wake-ups), this process's CPU (rusage), the system share of it, and voluntary context
switches (an ``epoll_wait`` that slept). Prints one JSON line per run and a summary line (``bench:
worker_iterations``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import uuid
from typing import Any

import anyio

from jobboard import JobContext, NewJob, open_board
from jobboard.worker import Worker, WorkerConfig

COUNTS = {"iterations": 0, "callbacks": 0}


def count_loop_iterations() -> None:
    """Count every ``_run_once`` of asyncio's loop, and the callbacks ready at its start."""
    original = asyncio.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def run_once(self: Any) -> None:
        COUNTS["iterations"] += 1
        COUNTS["callbacks"] += len(self._ready)
        original(self)

    asyncio.BaseEventLoop._run_once = run_once  # type: ignore[attr-defined]


async def nothing(ctx: JobContext) -> None:
    """A handler that does nothing."""


async def one_run(url: str, jobs: int, slots: int, prefetch: int) -> dict[str, Any]:
    async with open_board(url) as board:
        await board.post_many([NewJob("j", {"n": number}) for number in range(jobs)])
        COUNTS.update(iterations=0, callbacks=0)
        before = resource.getrusage(resource.RUSAGE_SELF)
        stats = await Worker(board, nothing, WorkerConfig(concurrency=slots, prefetch=prefetch, burst=True)).run()
        after = resource.getrusage(resource.RUSAGE_SELF)
    done = max(1, stats.consumed)
    system = after.ru_stime - before.ru_stime
    cpu = after.ru_utime - before.ru_utime + system
    return {"slots": slots, "prefetch": prefetch, "consumed": stats.consumed,
            "iterations_per_job": round(COUNTS["iterations"] / done, 2),
            "callbacks_per_job": round(COUNTS["callbacks"] / done, 2),
            "cpu_ms_per_job": round(cpu * 1000 / done, 3), "system_share": round(system / max(1e-9, cpu), 3),
            "sleeps_per_job": round((after.ru_nvcsw - before.ru_nvcsw) / done, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--shapes", default="16:0,1:16,16:16", help="SLOTS:PREFETCH, comma-separated")
    parser.add_argument("--linger", default="0", help="the board URL's ?linger=, comma-separated")
    parser.add_argument("--rounds", type=int, default=1)
    options = parser.parse_args(argv)
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    count_loop_iterations()
    ensure_redis_installed()
    runs = []
    with RedisServer(appendonly=False) as server:
        for _ in range(options.rounds):
            for shape in options.shapes.split(","):
                slots, prefetch = (int(part) for part in shape.split(":"))
                for linger in (float(value) for value in options.linger.split(",")):
                    url = server.url(f"/0/iterations-{uuid.uuid4().hex[:8]}") + (f"?linger={linger:g}" if linger else "")
                    run = {"linger": linger, **anyio.run(one_run, url, options.jobs, slots, prefetch)}
                    print(json.dumps(run), flush=True)
                    runs.append(run)
    print(json.dumps({"bench": "worker_iterations", "jobs": options.jobs, "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
