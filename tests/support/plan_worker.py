"""A worker process running zk-plan's check task, for the DAG fault test.

``python -m tests.support.plan_worker URL DIR`` runs check tasks. A task holds
an exclusive ``flock`` on ``DIR/lock-<n>`` while it runs: the lock dies with the
process, so a task that finds it taken is really running twice at once, and
that is written to ``DIR/violations.log``. Every run appends to ``DIR/runs.log``.
"""

from __future__ import annotations

import fcntl
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio

from jobboard import open_board
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers

SLOW_TASK, SLOW_SECONDS = 50, 1.5
"""Task t50 runs long enough for a test to SIGKILL its worker while it runs."""


def main(url: str, directory: Path) -> None:
    handlers = Handlers()

    @handlers.task("check")
    async def check(number: int, expected: list[int], *results: Any) -> int:
        with (directory / f"lock-{number}").open("a") as lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _append(directory / "violations.log", f"t{number} ran twice at once")
            if list(results) != expected:
                _append(directory / "violations.log", f"t{number} got {list(results)}, expected {expected}")
            _append(directory / "runs.log", f"t{number} {os.getpid()}")
            await anyio.sleep(SLOW_SECONDS if number == SLOW_TASK else random.uniform(0.02, 0.05))
        return number

    async def run() -> None:
        async with open_board(url) as board:
            worker = Worker(board, handlers, WorkerConfig(concurrency=2, grace_period=5))
            print("ready", flush=True)
            await worker.run(handle_signals=True)

    anyio.run(run)


def _append(path: Path, line: str) -> None:
    with path.open("a") as log:
        log.write(line + "\n")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
