"""A graceful stop gives an interrupted job back with ``board.release`` (its attempt uncounted where the board can):
rolling restarts no longer trash a long job that never failed. A requeued job over its attempts is logged as not run.

Real boards (memory://, ZooKeeper, Redis); each case a few seconds."""

from __future__ import annotations

import logging

import anyio
import pytest

from jobboard import JobState, open_board
from jobboard.board.contract import JobBoard
from jobboard.job import Job
from jobboard.worker.handlers import JobContext, RetryPolicy, as_async
from tests.support.boards import BACKENDS, fresh_board_url
from tests.support.workers import blocking_handler, running

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "graceful")


async def test_three_stops_of_a_long_job_leave_it_on_the_board_uncounted(
        board_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobboard.worker")
    with anyio.fail_after(40):
        async with open_board(board_url) as board:
            job = await board.post("long", max_attempts=2)
            for stop in range(1, 4):  # each stop's grace period is over before the handler ends
                started, block = blocking_handler()
                async with running(board, block, grace_period=0.1) as worker:
                    await started.wait()
                assert worker.stats.abandoned_on_shutdown == 1
                assert await board.state(job) is JobState.UNCLAIMED
                attempts = (await board.get(job)).attempts
                assert attempts == (0 if board.releases_uncounted else min(stop, 2))
                if not board.releases_uncounted:
                    return  # an abandon, as before: the rest is for the boards that uncount
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("abandoned_on_shutdown")]
    assert len(lines) == 3 and all(line.endswith("grace period of 0.1s over; given back uncounted") for line in lines)


async def test_a_failure_still_counts_its_attempt(board_url: str) -> None:
    calls = 0

    async def broken(ctx: JobContext) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("downstream is down")

    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            job = await board.post("fail", max_attempts=2)
            async with running(board, broken, retry=RetryPolicy(max_attempts=2, initial_delay=0)):
                outcome = await board.wait_for_completion(job)
            assert (outcome.state, calls) == (JobState.TRASHED, 2)


async def test_a_requeued_job_over_its_attempts_is_logged_as_not_run(
        board_url: str, caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def broken(ctx: JobContext) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("downstream is down")

    caplog.set_level(logging.INFO, logger="jobboard.worker")
    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            job = await board.post("fail")  # the worker's policy limits it, not the board (which would trash it)
            async with running(board, broken, retry=RetryPolicy(max_attempts=1)):
                await board.wait_for_completion(job)
                caplog.clear()
                again = await board.requeue(job)
                outcome = await board.wait_for_completion(again)
            assert (outcome.state, calls) == (JobState.TRASHED, 1)
    [line] = [record.getMessage() for record in caplog.records if record.getMessage().startswith("failed fail")]
    assert "attempt 2/1" in line
    assert line.endswith(": not run, over its attempts (requeue with reset_attempts to run it); "
                         "last error RuntimeError: downstream is down")


async def claimed(board: JobBoard, job: Job) -> None:
    for _ in range(500):
        if await board.state(job) is JobState.CLAIMED:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"{job.id} never claimed")


async def test_a_plain_def_handler_still_running_in_its_thread_is_given_back_counted(
        board_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A thread cannot be cancelled: a stop that gave such a job back uncounted let a handler that never ends come
    back at every stop for ever (review W1). Its attempt is counted, so ``max_attempts`` ends it."""
    import threading

    caplog.set_level(logging.INFO, logger="jobboard.worker")
    release = threading.Event()

    def stuck(ctx: JobContext) -> None:
        release.wait(10)

    try:
        with anyio.fail_after(40):
            async with open_board(board_url) as board:
                job = await board.post("stuck", max_attempts=2)
                async with running(board, as_async(stuck), grace_period=0.1) as worker:
                    await claimed(board, job)
                assert worker.stats.abandoned_on_shutdown == 1
                assert (await board.get(job)).attempts == 1  # counted: max_attempts ends a thread that never does
    finally:
        release.set()
