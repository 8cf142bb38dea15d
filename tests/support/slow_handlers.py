"""Handlers whose module takes a second to import: a window in which to send SIGTERM during start-up."""

from __future__ import annotations

import sys
import time

from jobboard.worker.handlers import Handlers, JobContext

print("importing", flush=True)
sys.stdout.flush()
time.sleep(1.0)

handlers = Handlers()


@handlers.register("echo")
async def echo(ctx: JobContext) -> str:
    return "echo"
