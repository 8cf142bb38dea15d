"""Handlers for the CLI tests: ``jobboard worker URL --handlers tests.support.cli_handlers:handlers``."""

from __future__ import annotations

import time
from typing import Any

import anyio

from jobboard.worker.handlers import Handlers, JobContext, RetryPolicy

handlers = Handlers()


@handlers.register("echo")
async def echo(ctx: JobContext) -> dict[str, Any]:
    return dict(ctx.details)


not_a_handler = 42


@handlers.register("sleep")
async def sleep(ctx: JobContext) -> float:
    seconds = float(ctx.details.get("s", 0.1))
    await anyio.sleep(seconds)
    return seconds


@handlers.register("fail", retry=RetryPolicy(max_attempts=2, initial_delay=0.05))
async def fail(ctx: JobContext) -> None:
    raise ValueError(f"always fails (attempt {ctx.attempt})")


@handlers.register("block")
def block(ctx: JobContext) -> float:
    """A plain def handler: runs in a thread that nothing can interrupt."""
    seconds = float(ctx.details.get("s", 0.1))
    time.sleep(seconds)
    return seconds
