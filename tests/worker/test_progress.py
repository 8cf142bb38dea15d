"""A job's progress reporter is made at its first report: from a sync handler's thread too, and not at all
for a job that reports nothing."""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

from jobboard import open_board
from jobboard.job import Progress
from jobboard.worker.handlers import Handlers, JobContext
from tests.support.workers import running

pytestmark = pytest.mark.timeout(60)


async def test_a_sync_handler_reports_from_its_thread_and_readers_see_it() -> None:
    handlers = Handlers()
    seen: list[Progress | None] = []

    def threaded(ctx: JobContext) -> str:  # run in a worker thread: its first report starts the writer
        for step in range(1, 6):
            ctx.progress(step / 10, f"step {step}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the writer (on the event loop) stores the latest value in time
            progress = anyio.from_thread.run(ctx.board.get, ctx.job).progress
            if progress is not None and progress.fraction == 0.5:
                seen.append(progress)
                break
            time.sleep(0.02)
        return "done"

    handlers.register("threaded", threaded)
    async with open_board(f"memory://{uuid.uuid4().hex}") as board:
        job = await board.post("threaded")
        with anyio.fail_after(30):
            async with running(board, handlers):
                outcome = await board.wait_for_completion(job)
    assert outcome.state.value == "complete"
    assert len(seen) == 1 and seen[0] is not None and (seen[0].fraction, seen[0].note) == (0.5, "step 5")


async def test_a_job_that_reports_nothing_gets_no_progress_writer() -> None:
    tasks: list[int] = []

    async def quiet(ctx: JobContext) -> None:
        await anyio.sleep(0.2)  # the writer, had one been started, would be running beside the handler
        tasks.append(len(anyio.get_running_tasks()))

    async def reporting(ctx: JobContext) -> None:
        ctx.progress(0.1)
        await anyio.sleep(0.2)
        tasks.append(len(anyio.get_running_tasks()))

    async with open_board(f"memory://{uuid.uuid4().hex}") as board:
        for handler in (quiet, reporting):
            job = await board.post("any")
            with anyio.fail_after(30):
                async with running(board, handler):
                    await board.wait_for_completion(job)
    assert tasks[1] == tasks[0] + 1, tasks
