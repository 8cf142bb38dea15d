"""A caller cancelled while a postgresql:// board part closes sees its own cancellation (review C's C4).

The feed's ``stop``, the session's ``close`` and the coalescer's ``close`` cancel a task and wait for it. They
waited with that task's ``CancelledError`` suppressed, and so suppressed the caller's own cancellation landing
meanwhile: under a stdlib ``asyncio.timeout`` around the close, the timeout never fired and the close ran as long
as the task's clean-up. They now wait with ``wait_ended`` (the caller's cancellation ends the wait at once; the
task ends in the background). No server is needed: the task the part waits for is a stand-in whose clean-up
takes 0.5 s, as a statement in flight or a connection's close may."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from jobboard_postgresql.coalescing import Coalescer
from jobboard_postgresql.feed import Feed
from jobboard_postgresql.options import parse
from jobboard_postgresql.session import Session

pytestmark = pytest.mark.timeout(30)

CLEAN_UP = 0.5
BOUND = 0.05


async def slow_to_end() -> None:
    """A task whose clean-up, once cancelled, takes ``CLEAN_UP`` seconds."""
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await asyncio.shield(asyncio.sleep(CLEAN_UP))
        raise


def feed_stop() -> tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]:
    feed = Feed(cast(Any, None), "b", "jobboard", lambda event: None, lambda: False, lambda event: None)
    feed._task = task = asyncio.get_running_loop().create_task(slow_to_end())
    return feed.stop, task


def session_close() -> tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]:
    session = Session(parse("postgresql://127.0.0.1:1/postgres?board=b"), lambda text: None, lambda lost: None)
    session._heartbeat = task = asyncio.get_running_loop().create_task(slow_to_end())
    return session.close, task


def coalescer_close() -> tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]:
    async def send(*args: Any) -> Any:
        raise AssertionError("nothing is sent")
    coalescer = Coalescer(cast(Any, send))
    coalescer._dispatcher = task = asyncio.get_running_loop().create_task(slow_to_end())
    return coalescer.close, task


@pytest.mark.parametrize("part", [feed_stop, session_close, coalescer_close], ids=lambda part: part.__name__)
async def test_a_close_under_a_stdlib_timeout_ends_at_the_timeout(
        part: Callable[[], tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]]) -> None:
    close, task = part()
    await asyncio.sleep(0)  # the stand-in is waiting
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(BOUND):
            await close()
    # the close gave up waiting at the bound: the task's clean-up is still running (a swallowed cancellation
    # would have waited it out), whatever the machine's load did to the clock
    assert not task.done(), f"the close waited {time.monotonic() - started:.2f}s for the task, past its {BOUND}s bound"
    await asyncio.wait([task])
    assert task.cancelled()


@pytest.mark.parametrize("part", [feed_stop, session_close, coalescer_close], ids=lambda part: part.__name__)
async def test_a_close_left_alone_waits_for_the_task(
        part: Callable[[], tuple[Callable[[], Awaitable[None]], asyncio.Task[None]]]) -> None:
    close, task = part()
    await asyncio.sleep(0)
    await asyncio.wait_for(close(), 5)
    assert task.cancelled()
