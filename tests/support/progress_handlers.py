"""Handlers for the progress tests: ``jobboard worker URL --handlers tests.support.progress_handlers:handlers``."""

from __future__ import annotations

import anyio

from jobboard.worker.handlers import Handlers, JobContext

handlers = Handlers()


@handlers.register("halfway")
async def halfway(ctx: JobContext) -> str:
    """Report half done, then run until the file named in the details exists (at most 30 s)."""
    ctx.progress(0.5, "halfway there")
    with anyio.move_on_after(30):
        while not await anyio.Path(ctx.details["until"]).exists():  # noqa: ASYNC110 - another process makes it
            await anyio.sleep(0.05)
    return "done"


@handlers.register("chatty")
def chatty(ctx: JobContext) -> int:
    """A sync handler (run in a thread) reporting 100 times in a second."""
    import time

    for step in range(1, 101):
        ctx.progress(step / 100, f"step {step}")
        time.sleep(0.01)
    return 100
