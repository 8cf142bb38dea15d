"""A worker process for fault tests.

``python -m tests.support.worker_proc URL EFFECTS_FILE [CONCURRENCY [standby]]`` runs a
worker whose ``work`` handler appends the job id to EFFECTS_FILE (the side
effect) and sleeps a little. SIGTERM stops it gracefully, at any moment after
``main`` starts; ``ready`` is printed once the worker is claiming. With ``standby``,
it prints ``standby`` once imported and opens the board only after a line on stdin
(a replacement started ahead, so that a restart costs no interpreter start-up).
"""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

import anyio
import anyio.to_thread

from jobboard import open_board
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.early_signals import catch_early_signals
from jobboard.worker.handlers import Handlers, JobContext

handlers = Handlers()


def main(url: str, effects: Path, concurrency: int, standby: bool) -> None:
    @handlers.register("work")
    async def work(ctx: JobContext) -> str:
        with effects.open("a") as log:
            log.write(f"{ctx.job.id}\n")
        await anyio.sleep(random.uniform(0.05, 0.1))
        return ctx.job.id

    async def run() -> None:
        board = open_board(url)  # not open yet; the backend's modules are loaded
        if standby:
            print("standby", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        async with board, anyio.create_task_group() as group:
            worker = Worker(board, handlers, WorkerConfig(concurrency=concurrency, grace_period=5))
            group.start_soon(functools.partial(worker.run, handle_signals=True))
            await worker.started.wait()
            print("ready", flush=True)

    catch_early_signals()
    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4, sys.argv[4:] == ["standby"])
