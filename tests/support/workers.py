"""A worker running in the background of a test, and a handler that blocks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import JobContext


@asynccontextmanager
async def running(board: JobBoard, handler: Any, **config: Any) -> AsyncIterator[Worker]:
    """A worker (``WorkerConfig(**config)``) running in the background for the body of the ``with``;
    stopped (gracefully) after it, and waited for."""
    worker = Worker(board, handler, WorkerConfig(**config))
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        yield worker
        worker.stop()


def blocking_handler() -> tuple[anyio.Event, Callable[[JobContext], Awaitable[None]]]:
    """A handler that does not end by itself (it sleeps 60 s), and the event it sets once it runs."""
    started = anyio.Event()

    async def block(ctx: JobContext) -> None:
        started.set()
        await anyio.sleep(60)

    return started, block
