"""Claim-ahead in the worker (``WorkerConfig.prefetch``, ``jobboard worker --prefetch N``): at most N jobs
held claimed and unstarted, run in the board's order, and given back at once when the worker stops."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import anyio
import pytest

from jobboard import JobBoard, JobContext, JobState, Priority, open_board
from jobboard.worker.conductor import Worker, WorkerConfig

pytestmark = pytest.mark.timeout(60)

HANDLERS = "tests.support.cli_handlers:handlers"
SESSION_TIMEOUT = 30  # far longer than the test waits: a held job back on the board was given back


def board_url(backend: str, redis_url: str) -> str:
    name = f"prefetch-{uuid.uuid4().hex}"
    return f"{redis_url}/0/{name}?session_timeout={SESSION_TIMEOUT}" if backend == "redis" else f"memory://{name}"


async def nothing(ctx: JobContext) -> None:
    """A handler that does nothing."""


async def claimed_by(board: JobBoard, jobs: list[str]) -> list[str | None]:
    return [await board.owner(job) for job in jobs]


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_worker_holds_at_most_prefetch_jobs_and_runs_them_in_order(backend: str, redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(backend, redis_url)) as board:
            jobs = [(await board.post("echo", {"i": i}, priority=Priority.HIGH if i % 2 else Priority.LOW)).id
                    for i in range(7)]
            ran: list[str] = []
            holding: list[int] = []
            worker: Worker

            async def echo(ctx: JobContext) -> None:
                ran.append(ctx.job.id)
                holding.append(sum(owner is not None for owner in await claimed_by(board, jobs)))

            worker = Worker(board, echo, WorkerConfig(prefetch=2, burst=True, concurrency=1))
            stats = await worker.run()
    assert ran == [jobs[i] for i in (1, 3, 5, 0, 2, 4, 6)]  # priority, then age
    assert max(holding) == 3 and holding[0] == 3  # the running job and 2 ahead, from the first claim call
    assert (stats.claimed, stats.consumed, stats.released) == (7, 7, 0)


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_stop_gives_back_the_jobs_held_ahead(backend: str, redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(backend, redis_url)) as board:
            first = await board.post("echo", priority=Priority.HIGH)
            rest = [(await board.post("echo", max_attempts=1)).id for _ in range(4)]
            started = anyio.Event()

            async def hold(ctx: JobContext) -> None:
                started.set()
                await anyio.sleep(60)

            worker = Worker(board, hold, WorkerConfig(prefetch=3, grace_period=0.2))
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await started.wait()
                assert await claimed_by(board, rest) == [worker.owner] * 3 + [None]
                worker.stop()
            assert await board.owner(first) is None  # abandoned at the grace period's end
            assert await claimed_by(board, rest) == [None] * 4
            assert (worker.stats.claimed, worker.stats.abandoned_on_shutdown, worker.stats.released) == (1, 1, 3)
            if not board.releases_uncounted:
                return  # given back as an abandon: the attempt stays counted
            assert [(await board.get(job)).attempts for job in rest] == [0] * 4
            done = await Worker(board, nothing, WorkerConfig(burst=True)).run()
            assert done.consumed == 5  # max_attempts=1, given back unstarted: not trashed
            assert [await board.state(job) for job in rest] == [JobState.COMPLETE] * 4


def test_sigterm_gives_back_the_jobs_held_ahead_at_once(redis_url: str) -> None:
    """``jobboard worker --prefetch 3``: SIGTERM while one job runs, three held; the three are claimable within
    seconds (not after the session timeout) with their attempt uncounted, and the process exits 0."""

    async def post(url: str) -> tuple[str, list[str]]:
        async with open_board(url) as board:
            first = await board.post("sleep", {"s": 60}, priority=Priority.HIGH)
            return first.id, [(await board.post("echo", max_attempts=1)).id for _ in range(4)]

    async def owners(url: str, jobs: list[str]) -> list[str | None]:
        async with open_board(url) as board:
            return await claimed_by(board, jobs)

    url = board_url("redis", redis_url)
    first, rest = anyio.run(post, url)
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS,
                              "--prefetch", "3", "--grace-period", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while anyio.run(owners, url, [first]) == [None]:
            assert time.monotonic() < deadline and child.poll() is None, "the worker claimed nothing"
            time.sleep(0.05)
        held = anyio.run(owners, url, rest)
        assert held[3] is None and len(set(held[:3])) == 1 and held[0] is not None, held
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert anyio.run(owners, url, [first, *rest]) == [None] * 5

    async def rest_run(url: str) -> list[JobState]:
        async with open_board(url) as board:
            assert [(await board.get(job)).attempts for job in rest] == [0] * 4
            await Worker(board, nothing, WorkerConfig(burst=True)).run()
            return [await board.state(job) for job in rest]

    assert anyio.run(rest_run, url) == [JobState.COMPLETE] * 4
