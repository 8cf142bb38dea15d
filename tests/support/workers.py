"""A worker running in the background of a test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.worker.conductor import Worker, WorkerConfig


@asynccontextmanager
async def running(board: JobBoard, handler: Any, **config: Any) -> AsyncIterator[Worker]:
    """A worker (``WorkerConfig(**config)``) running in the background for the body of the ``with``;
    stopped (gracefully) after it, and waited for."""
    worker = Worker(board, handler, WorkerConfig(**config))
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        yield worker
        worker.stop()
