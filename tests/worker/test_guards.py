"""A running job's guards (the claim's watch, the lease's keeper, the progress writer) run beside its handler
without holding its slot: a handler that never waited costs its slot no event-loop iteration for them, a guard
whose first turn comes after the handler's end does nothing, and the one guard a job's end waits for is one
holding the job (the lease keeper's abandon)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from jobboard import JobContext, NewJob, open_board
from jobboard.errors import BackendUnavailable
from jobboard.worker import Worker, WorkerConfig, WorkerStats
from jobboard.worker.guards import Guards

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def loop_iterations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The event loop's iterations (``_run_once`` calls) so far, in ``[0]``."""
    counted = [0]
    original = asyncio.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def run_once(self: Any) -> None:
        counted[0] += 1
        original(self)

    monkeypatch.setattr(asyncio.BaseEventLoop, "_run_once", run_once)
    yield counted


async def nothing(ctx: JobContext) -> None:
    """A handler that never waits."""


@pytest.mark.parametrize(("prefetch", "most"), [(0, 2.5), (8, 2.5)])
async def test_a_one_slot_worker_spends_few_event_loop_iterations_a_job(
    prefetch: int, most: float, loop_iterations: list[int],
) -> None:
    """memory://, one slot, 200 jobs of a handler that never waits: 2.03 iterations a job, 2.15 with prefetch
    (6.03 and 7.03 while the guards were a task group of the job's own: the slot waited for anyio to deliver
    their cancel, over several iterations; 3.03 with prefetch while a held job waited for a claimer's turn)."""
    with anyio.fail_after(30):
        async with open_board(f"memory://{uuid.uuid4().hex}") as board:
            await board.post_many([NewJob("j", {"n": number}) for number in range(200)])
            before = loop_iterations[0]
            stats = await Worker(board, nothing, WorkerConfig(concurrency=1, prefetch=prefetch, burst=True)).run()
            per_job = (loop_iterations[0] - before) / 200
    assert stats.consumed == 200
    assert per_job <= most, per_job


@asynccontextmanager
async def guards_of_a_job() -> AsyncIterator[Guards]:
    """A job's guards among the tasks of a group standing for the worker's, which ends (its tasks done) on
    leaving; within 5 s."""
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            yield Guards(tasks)


async def test_a_guard_whose_first_turn_comes_after_the_close_does_nothing_and_none_starts_after() -> None:
    ran: list[str] = []

    async def guard(name: str) -> None:
        ran.append(name)

    async with guards_of_a_job() as guards:
        guards.start_soon(lambda: guard("before"))
        await guards.close()  # the handler ended before the guard's first turn
        guards.start_soon(lambda: guard("after"))
    assert ran == []


async def test_the_close_cancels_a_waiting_guard_without_waiting_for_it() -> None:
    started, ended = anyio.Event(), anyio.Event()

    async def watch() -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    async with guards_of_a_job() as guards:
        guards.start_soon(watch)
        await started.wait()
        await guards.close()
        assert not ended.is_set()  # the slot went on at once
    assert ended.is_set()  # and the guard was cancelled


async def test_the_close_waits_for_a_guard_holding_the_job() -> None:
    started = anyio.Event()
    applied: list[float] = []

    async def keep_lease() -> None:
        with guards.holding():
            started.set()
            with anyio.CancelScope(shield=True):  # as the lease keeper's abandon is
                await anyio.sleep(0.2)
            applied.append(anyio.current_time())

    async with guards_of_a_job() as guards:
        guards.start_soon(keep_lease)
        await started.wait()
        await guards.close()
        closed_at = anyio.current_time()
        with pytest.raises(AssertionError), guards.holding():  # none holds the job once the handler ended
            pass
    assert applied and applied[0] <= closed_at


def cleanup_outlasting_the_lease(started: anyio.Event) -> Callable[[JobContext], Awaitable[None]]:
    """A handler that waits until cancelled, then cleans up for 0.6 s, shielded (past a lease of 0.5 s)."""
    async def handler(ctx: JobContext) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.6)

    return handler


async def running_until(worker: Worker, moment: Callable[[], Awaitable[None]]) -> WorkerStats:
    """Run ``worker`` while ``moment()`` runs beside it; its stats."""
    ran: list[WorkerStats] = []

    async def run() -> None:
        ran.append(await worker.run())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        await moment()
    return ran[0]


async def test_a_stop_now_during_a_cleanup_that_outlasts_the_lease_is_a_shutdown_not_a_lost_lease() -> None:
    """(Review of the guards' move: the lease keeper ran on until the handler's cancellation had run its course,
    and the stop turned into a lost lease, the attempt counted.)"""
    started = anyio.Event()
    with anyio.fail_after(10):
        async with open_board(f"memory://{uuid.uuid4().hex}") as board:
            job = await board.post("j", {})
            worker = Worker(board, cleanup_outlasting_the_lease(started),
                            WorkerConfig(concurrency=1, lease=0.5, lease_renewal="heartbeat", grace_period=0))

            async def stop_with_lease_left() -> None:
                await started.wait()
                await anyio.sleep(0.2)  # 0.3 s of the lease left
                worker.stop(now=True)

            stats = await running_until(worker, stop_with_lease_left)
            after = await board.get(job.id)
    assert (stats.lost, stats.abandoned_on_shutdown) == (0, 1), stats
    assert after is not None and after.attempts == 0, after  # given back uncounted


async def test_a_lost_claim_cancels_its_lease_keeper_with_its_handler() -> None:
    """A job cancelled from outside while its board refuses every abandon: the burst worker ends once the
    handler's cleanup has (review: the lease keeper ran on, abandoned the lost claim at the lease's end, and the
    job's end waited for that abandon for as long as the outage lasted)."""
    started = anyio.Event()
    abandons: list[Any] = []

    async def abandon(*args: Any, **kwargs: Any) -> None:
        abandons.append(args)
        raise BackendUnavailable("down for abandons")

    with anyio.fail_after(10):
        async with open_board(f"memory://{uuid.uuid4().hex}") as board:
            job = await board.post("j", {})
            board.abandon = abandon  # type: ignore[method-assign]
            worker = Worker(board, cleanup_outlasting_the_lease(started),
                            WorkerConfig(concurrency=1, lease=0.5, lease_renewal="heartbeat", burst=True,
                                         grace_period=1))

            async def cancel_with_lease_left() -> None:
                await started.wait()
                await anyio.sleep(0.2)
                await board.cancel(job.id, "no longer wanted")
                cancelled_at.append(anyio.current_time())

            cancelled_at: list[float] = []
            stats = await running_until(worker, cancel_with_lease_left)
            took = anyio.current_time() - cancelled_at[0]
    assert stats.cancelled == 1 and not abandons, (stats, abandons)
    assert took < 3, took  # the cleanup's 0.6 s, then the burst worker's end


async def test_a_handler_that_blocks_the_loop_past_its_lease_without_awaiting_is_settled_with_its_result() -> None:
    """Its lease keeper's first turn comes after its end and does nothing (it used to abandon the finished job,
    counted lost: 5 runs, then trashed)."""
    async def blocking(ctx: JobContext) -> None:
        time.sleep(0.4)  # noqa: ASYNC251 - the point: the loop is blocked past the lease, and no await

    with anyio.fail_after(10):
        async with open_board(f"memory://{uuid.uuid4().hex}") as board:
            await board.post("j", {})
            stats = await Worker(board, blocking, WorkerConfig(concurrency=1, lease=0.2, burst=True)).run()
    assert (stats.consumed, stats.lost) == (1, 0), stats
