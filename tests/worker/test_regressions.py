"""Regression tests for issue 10's findings (each failed before its fix); idle workers outliving their session."""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from jobboard import EventKind, JobBoard, JobState, open_board
from jobboard.backend import SettleAction as Action
from jobboard.board.events import EventStream
from jobboard.job import Claim
from jobboard.worker.conductor import Worker, WorkerConfig, WorkerStats
from jobboard.worker.handlers import JobContext, RetryPolicy
from jobboard.worker.retry import Backoff, decide
from jobboard.wrappers.faulty import FaultyBoard
from tests.support.boards import BACKENDS, fresh_board_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "regress")


@asynccontextmanager
async def running(board: JobBoard, handler: Any, **config: Any) -> AsyncIterator[Worker]:
    worker = Worker(board, handler, WorkerConfig(**config))
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await worker.started.wait()
        yield worker
        worker.stop()


async def idle_then_run(url: str, idle: float, **config: Any) -> tuple[WorkerStats, list[EventKind]]:
    """A worker idle for ``idle`` s on a fresh board, then given a job: its stats once it ran the job, and
    the board-level events (a suspended connection, an expired session, ...) its board saw meanwhile."""
    async def echo(ctx: JobContext) -> str:
        return "ok"

    seen: list[EventKind] = []

    async def watch(stream: EventStream) -> None:
        async for event in stream:
            if event.job_id is None:
                seen.append(event.kind)  # noqa: PERF401 (one by one: the watch is cancelled, it never ends)

    async with open_board(url) as board, board.events() as stream, anyio.create_task_group() as group:
        group.start_soon(watch, stream)
        async with running(board, echo, **config) as worker:
            await anyio.sleep(idle)
            job = await board.post("ping", keep_result=True)
            assert (await board.wait_for_completion(job)).result == "ok"
        group.cancel_scope.cancel()
    return worker.stats, seen


SESSION_TIMEOUT = 2.0
"""The short idle test's session timeout (the ZooKeeper test server allows 1 s and up)."""


async def test_idle_workers_outlast_their_session_timeout_on_every_backend(zk_hosts: str, redis_url: str) -> None:
    """Idle for 2.5 x the session timeout and 5 x idle_backoff_max (the three backends at once, 5 s in all):
    the session lives on (no backend error, no board event), and a job posted then is run."""
    name, timeout = f"idle-{uuid.uuid4().hex}", f"session_timeout={SESSION_TIMEOUT:g}"
    urls = {"memory": f"memory://{name}", "zookeeper": f"zookeeper://{zk_hosts}/regress/{name}?{timeout}",
            "redis": f"{redis_url}/0/{name}?{timeout}"}
    ended: dict[str, tuple[int, int, list[EventKind]]] = {}

    async def idle_on(backend: str) -> None:
        stats, seen = await idle_then_run(urls[backend], 2.5 * SESSION_TIMEOUT, idle_backoff_max=1.0)
        ended[backend] = (stats.consumed, stats.backend_errors, seen)

    with anyio.fail_after(2.5 * SESSION_TIMEOUT + 20):
        async with anyio.create_task_group() as group:
            for backend in BACKENDS:
                group.start_soon(idle_on, backend)
    assert ended == {backend: (1, 0, []) for backend in BACKENDS}


async def test_an_idle_worker_survives_more_than_twice_its_idle_backoff_max(board_url: str) -> None:
    """Bug 1: the idle wait's timeout left ``found`` unset: UnboundLocalError after idle_backoff_max."""
    async def echo(ctx: JobContext) -> str:
        return "ok"

    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            async with running(board, echo, idle_backoff_max=0.3) as worker:
                began = time.monotonic()
                await anyio.sleep(1.0)  # > 3x idle_backoff_max, on an empty board
                job = await board.post("ping", keep_result=True)
                assert (await board.wait_for_completion(job)).result == "ok"
            idled = time.monotonic() - began
    assert idled >= 1.0 and worker.stats.consumed == 1


def claim_at(attempt: int, max_attempts: int | None = None) -> Claim:
    from jobboard.job import Job

    return Claim(Job(id="j", name="n", attempts=attempt, max_attempts=max_attempts), "w", attempt)


def test_by_default_a_failing_job_backs_off_and_ends_in_the_trash_after_5_attempts() -> None:
    """Bug 2: the defaults retried forever, at once."""
    error = ValueError("always")
    delays = []
    for attempt in range(1, 5):
        settlement = decide(claim_at(attempt), error=error)
        assert settlement.action is Action.ABANDON and settlement.error is not None
        assert settlement.error.attempt == attempt and settlement.error.type == "ValueError"
        delays.append(settlement.retry_after)
    assert [1 * 2 ** n * 0.5 <= d <= 2 ** n for n, d in enumerate(delays)] == [True] * 4, delays  # type: ignore[operator]
    last = decide(claim_at(5), error=error)
    assert last.action is Action.TRASH and "attempt 5 of 5" in last.reason
    assert WorkerConfig().retry.max_attempts == 5


def test_a_job_retried_without_a_limit_waits_max_delay_however_many_attempts_it_had() -> None:
    """``max_attempts=None`` retries forever; attempt 2,000 raised OverflowError (2.0 ** 1999)."""
    policy = RetryPolicy(max_attempts=None, max_delay=300.0, jitter=0)
    settlement = decide(claim_at(2000), error=ValueError("again"), policy=policy)
    assert settlement.action is Action.ABANDON and settlement.retry_after == 300.0


def test_the_worker_backs_off_as_a_retry_policy_does() -> None:
    """One exponential back-off: the worker's (settles, claims, idling) and a job's retry policy."""
    backoff, policy = Backoff(1.0, 2.0, 300.0), RetryPolicy(jitter=0)
    assert [backoff.next() for _ in range(12)] == [policy.delay(attempt) for attempt in range(1, 13)]
    assert [backoff.next() for _ in range(2000)][-1] == 300.0
    jittered = Backoff(10.0, 1.0, 10.0, jitter=0.2)
    assert all(8.0 <= jittered.next() <= 10.0 for _ in range(100))


async def test_an_always_failing_job_is_tried_max_attempts_times_and_keeps_its_error(
    board_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Bug 2 end to end (fast delays): bounded attempts, the error kept and logged."""
    attempts: list[float] = []

    async def broken(ctx: JobContext) -> None:
        attempts.append(time.monotonic())
        raise ValueError(f"broken on attempt {ctx.attempt}")

    policy = RetryPolicy(max_attempts=4, initial_delay=0.05, factor=2, jitter=0)
    caplog.set_level(logging.INFO, logger="jobboard.worker")
    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            job = await board.post("convert")
            async with running(board, broken, retry=policy) as worker:
                outcome = await board.wait_for_completion(job)
            trashed = [item async for item in board.trashed()]
    assert outcome.state is JobState.TRASHED and len(attempts) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert [gap >= delay for gap, delay in zip(gaps, (0.05, 0.1, 0.2), strict=True)] == [True] * 3, gaps
    error = trashed[0].job.last_error
    assert error is not None and (error.type, error.attempt) == ("ValueError", 4)
    assert "broken on attempt 4" in error.message and "Traceback" in error.traceback
    assert (worker.stats.retried, worker.stats.failed) == (3, 1)
    lines = [r for r in caplog.records if r.name == "jobboard.worker" and getattr(r, "job_id", None) == job.id]
    assert [r.outcome for r in lines] == ["retried", "retried", "retried", "failed"]  # type: ignore[attr-defined]
    assert "ValueError: broken on attempt 1; next attempt in 0.1s" in lines[0].getMessage()


async def test_the_last_error_is_on_the_job_while_it_waits_for_its_next_attempt(board_url: str) -> None:
    failed = anyio.Event()

    async def broken(ctx: JobContext) -> None:
        failed.set()
        raise KeyError("missing")

    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            job = await board.post("convert")
            async with running(board, broken, retry=RetryPolicy(initial_delay=60)):
                await failed.wait()
            stored = await board.get(job)  # the worker stopped: its settle is done
    assert stored.last_error is not None and stored.last_error.type == "KeyError"
    assert stored.not_before is not None and stored.not_before - time.time() > 20


async def test_a_settle_that_meets_backend_unavailable_is_retried(board_url: str) -> None:
    """Bug 3: ``except JobBoardError`` came first, so a transient error dropped the settle."""
    async def echo(ctx: JobContext) -> str:
        return "done"

    with anyio.fail_after(10):
        async with open_board(board_url) as inner:
            board = FaultyBoard(inner, seed=3, rate=1.0, methods={"consume"}, kinds=("unavailable",), budget=3)
            await board.open()
            job = await board.post("echo", keep_result=True)
            async with running(board, echo) as worker:
                assert (await board.wait_for_completion(job)).result == "done"
    assert board.injected[("consume", "unavailable")] == 3
    assert (worker.stats.consumed, worker.stats.lost, worker.stats.unsettled) == (1, 0, 0)
    assert worker.stats.backend_errors == 3


@pytest.mark.skipif(not os.environ.get("JOBBOARD_LONG_TESTS"), reason="22 s per backend: set JOBBOARD_LONG_TESTS=1")
@pytest.mark.timeout(90)
async def test_an_idle_worker_survives_more_than_twice_the_default_idle_backoff_max(board_url: str) -> None:
    """Bug 1 at the defaults: idle for 2.2 x idle_backoff_max (10 s; the session times out after 4 s), then a job."""
    idle = 2.2 * WorkerConfig().idle_backoff_max
    with anyio.fail_after(idle + 30):
        stats, seen = await idle_then_run(board_url, idle)
    assert (stats.consumed, stats.backend_errors, seen) == (1, 0, [])


async def test_an_idle_worker_rides_out_failing_and_hanging_waits(board_url: str) -> None:
    """Found by the fault-injection run: a TimeoutError out of ``board.wait()`` killed an idle worker."""
    async def echo(ctx: JobContext) -> str:
        return "ok"

    with anyio.fail_after(30):
        async with open_board(board_url) as inner:
            board = FaultyBoard(inner, seed=5, rate=1.0, hang_for=0.5, methods={"wait"},
                                kinds=("timeout", "unavailable", "hang"), budget=12)
            await board.open()
            async with running(board, echo, idle_backoff=0.01, idle_backoff_max=0.2) as worker:
                for _ in range(400):  # until every fault was injected (the board offers no event for it)
                    if not board.budget:
                        break
                    await anyio.sleep(0.05)
                job = await board.post("ping", keep_result=True)
                assert (await board.wait_for_completion(job)).result == "ok"
    assert sum(board.injected.values()) == 12 and len({kind for _, kind in board.injected}) == 3
    errors = sum(n for (_, kind), n in board.injected.items() if kind != "hang")  # a hang is an idle timeout
    assert worker.stats.consumed == 1 and worker.stats.backend_errors == errors


async def test_a_job_too_large_to_carry_its_error_record_is_still_settled(zk_hosts: str) -> None:
    """The error record makes an abandon (or trash) larger than the board accepts: settle without it."""
    async def broken(ctx: JobContext) -> None:
        raise ValueError("x" * 900)

    url = f"zookeeper://{zk_hosts}/regress/{uuid.uuid4().hex}?jute_maxbuffer=8192"
    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await board.post("big", {"blob": "y" * (board.max_posting_bytes - 2600)})
            policy = RetryPolicy(max_attempts=2, initial_delay=0.01)
            async with running(board, broken, retry=policy) as worker:
                outcome = await board.wait_for_completion(job)
    assert outcome.state is JobState.TRASHED and outcome.reason is not None
    assert outcome.reason.startswith("failed on attempt 2 of 2: ValueError: xxx")
    assert (worker.stats.retried, worker.stats.failed, worker.stats.unsettled) == (1, 1, 0)
