"""Handlers for the CLI tests: ``jobboard worker URL --handlers tests.support.cli_handlers:handlers``."""

from __future__ import annotations

from typing import Any

from jobboard.handlers import Handlers, JobContext

handlers = Handlers()


@handlers.register("echo")
async def echo(ctx: JobContext) -> dict[str, Any]:
    return dict(ctx.details)


not_a_handler = 42
