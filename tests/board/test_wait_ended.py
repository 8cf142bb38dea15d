"""Tasks cancelled and then waited for, under a caller's anyio cancel scope (``wait_ended``).

``asyncio.gather(..., return_exceptions=True)`` of tasks just cancelled, itself cancelled while it waits, raises
its last task's ``CancelledError`` (no scope's message), not the caller's: anyio's scope does not take it as its
own and lets it out, ending the caller's task. That ended the spread board's ``wait`` (fa4fbc8) and could end a
board's close (``BoardServices.cancel_tasks``), pg's keeper stop and the spread board's pause fan-out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest

from jobboard.board.services import BoardServices, wait_ended

pytestmark = pytest.mark.timeout(30)


async def stubborn(steps: int) -> None:
    """A task that takes ``steps`` loop iterations to end once cancelled (clean-up that awaits)."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        for _ in range(steps):
            await asyncio.sleep(0)
        raise


async def cancel_after(scope: anyio.CancelScope, iterations: int) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)
    scope.cancel()


async def escapes(end: Callable[[list[asyncio.Task[None]]], Awaitable[None]], rounds: int = 120) -> int:
    """How many of ``rounds`` scope cancellations, landing 0..5 iterations into ``end``, left their scope."""
    escaped = 0
    for index in range(rounds):
        scope = anyio.CancelScope()

        canceller = asyncio.ensure_future(cancel_after(scope, index % 6))
        tasks = [asyncio.ensure_future(stubborn(steps)) for steps in (4, 0)]
        await asyncio.sleep(0)
        try:
            with scope:
                for task in tasks:
                    task.cancel()
                await end(tasks)
        except asyncio.CancelledError:
            escaped += 1
            current = asyncio.current_task()
            assert current is not None
            while current.cancelling():
                current.uncancel()
        await canceller
        await asyncio.wait(tasks)
    return escaped


async def test_gather_lets_the_cancellation_out_which_is_why_wait_ended_exists() -> None:
    async def gathered(tasks: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)

    assert await escapes(gathered) > 0  # the interpreter's behaviour this module guards against


async def test_wait_ended_keeps_the_cancellation_in_its_scope() -> None:
    assert await escapes(wait_ended) == 0


async def test_a_boards_task_cancel_keeps_the_cancellation_in_its_scope() -> None:
    async def cancelled_by_services(tasks: list[asyncio.Task[None]]) -> None:
        services = BoardServices("memory://x")
        services.tasks.update(tasks)
        await services.cancel_tasks()

    assert await escapes(cancelled_by_services) == 0


async def test_wait_ended_waits_for_every_task_and_retrieves_failures() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failing = asyncio.ensure_future(fails())
    slow = asyncio.ensure_future(stubborn(3))
    slow.cancel()
    await wait_ended([failing, slow])
    assert failing.done() and slow.cancelled()
    assert failing._log_traceback is False  # retrieved: no "exception was never retrieved" at collection
