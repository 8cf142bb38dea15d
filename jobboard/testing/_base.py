"""Fixtures and helpers shared by the conformance mixins."""

from __future__ import annotations

import abc
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any, TypeVar, cast

import anyio
import pytest

from jobboard.board import JobBoard
from jobboard.job import Job
from jobboard.registry import open_board

TestFunction = TypeVar("TestFunction", bound=Callable[..., Coroutine[Any, Any, None]])

BoardOpener = Callable[[], Awaitable[JobBoard]]


def bounded(test: TestFunction) -> TestFunction:
    """Fail the test if it runs longer than the class's ``time_limit`` seconds."""

    @functools.wraps(test)
    async def run(self: ConformanceBase, *args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(self.time_limit):
            return await test(self, *args, **kwargs)

    return cast(TestFunction, run)


class ConformanceBase(abc.ABC):
    """Subclass (as ``Test...``) and provide a ``board_url`` fixture naming a
    fresh, empty board for each test, plus :meth:`inject_malformed`."""

    time_limit: float = 15.0
    """Seconds each conformance test may take."""
    delay_unit: float = 0.3
    """Seconds used for ``retry_after`` checks; raise it for slow backends."""

    @abc.abstractmethod
    async def inject_malformed(self, board: JobBoard) -> None:
        """Write onto ``board``'s storage one job entry that is not a valid posting."""

    @pytest.fixture
    async def open_boards(self, board_url: str) -> AsyncIterator[BoardOpener]:
        """Opens any number of boards on ``board_url``; all are closed after the test."""
        async with AsyncExitStack() as stack:

            async def opener() -> JobBoard:
                return await stack.enter_async_context(open_board(board_url))

            yield opener

    @pytest.fixture
    async def board(self, open_boards: BoardOpener) -> JobBoard:
        return await open_boards()


async def listed(board: JobBoard, *, only_unclaimed: bool = False) -> list[Job]:
    return [job async for job in board.iterjobs(only_unclaimed=only_unclaimed)]


async def listed_ids(board: JobBoard, *, only_unclaimed: bool = False) -> list[str]:
    return [job.id for job in await listed(board, only_unclaimed=only_unclaimed)]
