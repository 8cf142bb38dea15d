"""Fixtures and helpers shared by the conformance mixins."""

from __future__ import annotations

import abc
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Protocol, TypeVar, cast

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.registry import open_board
from jobboard.job import Claim, Job

TestFunction = TypeVar("TestFunction", bound=Callable[..., Coroutine[Any, Any, None]])

BoardMaker = Callable[[str], JobBoard]
"""Makes an unopened board for a URL."""

OPTIONAL = frozenset({"report_progress", "purge", "requeue", "result_ttl", "trash_ttl", "never_posted",
                      "flow_control"})
"""What a backend may declare in :attr:`ConformanceBase.unsupported`: the operations whose contract
default raises ``Unsupported``, the ``result_ttl`` and ``trash_ttl`` options, ``never_posted``
telling a well-formed id past the board's last one (the contract lets a backend say ``False``), and
``flow_control`` (limits and pauses; the cases also skip when the backend does not override ``set_limit``)."""


class BoardOpener(Protocol):
    def __call__(self, **options: object) -> Awaitable[JobBoard]:
        """Open a board on the test's ``board_url``, with ``options`` added to its query."""


def bounded(test: TestFunction) -> TestFunction:
    """Fail the test if it runs longer than the class's ``time_limit`` seconds."""

    @functools.wraps(test)
    async def run(self: ConformanceBase, *args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(self.time_limit):
            return await test(self, *args, **kwargs)

    return cast(TestFunction, run)


def with_options(url: str, options: Mapping[str, object]) -> str:
    """``url`` with ``options`` added to its query."""
    for name, value in options.items():
        url = f"{url}{'&' if '?' in url else '?'}{name}={value}"
    return url


class ConformanceBase(abc.ABC):
    """Subclass (as ``Test...``) and provide a ``board_url`` fixture naming a
    fresh, empty board for each test, plus :meth:`inject_malformed` and :meth:`next_id`."""

    time_limit: float = 15.0
    """Seconds each conformance test may take."""
    delay_unit: float = 0.3
    """Seconds used for ``retry_after`` checks; raise it for slow backends."""
    claim_next_best_first: bool = True
    """Whether ``claim_next`` hands out the board's best claimable job. False declares the one relaxation of
    order a backend may document (a claimer's nearby jobs first: the redis:// spread board's ``order=home``):
    the flow-control cases then accept two claims of jobs in different places in either order, and check
    everything else as before."""
    unsupported: frozenset[str] = frozenset()
    """What this backend does not implement, from :data:`OPTIONAL`: only the cases needing one of
    these skip. Any other operation raising ``Unsupported``, or option not honoured, fails its case."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.unsupported) - OPTIONAL
        if unknown:
            raise TypeError(f"{cls.__name__}.unsupported names {sorted(unknown)}; "
                            f"a backend may only declare {sorted(OPTIONAL)}")

    @abc.abstractmethod
    async def inject_malformed(self, board: JobBoard) -> None:
        """Write onto ``board``'s storage one job entry that is not a valid posting."""

    def next_id(self, job_id: str) -> str:
        """The id this backend gives the job posted right after the job ``job_id``, at its priority,
        when nothing else is posted between (needed unless ``never_posted`` is declared unsupported)."""
        raise NotImplementedError(f"{type(self).__name__} must give next_id(), or declare 'never_posted' unsupported")

    def skip_if_unsupported(self, feature: str) -> None:
        """Skip the case when the backend declares ``feature`` unsupported; otherwise it must work."""
        if feature not in OPTIONAL:
            raise ValueError(f"{feature!r} cannot be declared unsupported")
        if feature in self.unsupported:
            pytest.skip(f"{type(self).__name__} declares {feature} unsupported")

    @pytest.fixture
    def make_board(self) -> BoardMaker:
        """Makes the unopened board for a URL; a suite that tests a wrapper of boards overrides it."""
        return open_board

    @pytest.fixture
    async def open_boards(self, board_url: str, make_board: BoardMaker) -> AsyncIterator[BoardOpener]:
        """Opens any number of boards on ``board_url``; all are closed after the test."""
        async with AsyncExitStack() as stack:

            async def opener(**options: object) -> JobBoard:
                return await stack.enter_async_context(make_board(with_options(board_url, options)))

            yield opener

    @pytest.fixture
    async def board(self, open_boards: BoardOpener) -> JobBoard:
        return await open_boards()


async def listed(board: JobBoard, *, only_unclaimed: bool = False) -> list[Job]:
    return [job async for job in board.iterjobs(only_unclaimed=only_unclaimed)]


async def listed_ids(board: JobBoard, *, only_unclaimed: bool = False) -> list[str]:
    return [job.id for job in await listed(board, only_unclaimed=only_unclaimed)]


@asynccontextmanager
async def watching(board: JobBoard, claim: Claim) -> AsyncIterator[list[str]]:
    """``board.watch_claim(claim)`` runs in the background during the body; the list the body gets receives
    its reason when it returns. Leaving the ``with`` waits for it."""
    reasons: list[str] = []

    async def watch() -> None:
        reasons.append(await board.watch_claim(claim))

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        yield reasons


async def reason_after(board: JobBoard, claim: Claim, act: Callable[[], Awaitable[object]]) -> str:
    """Watch ``claim`` on ``board`` while ``act`` runs; the watch must end with a reason."""
    async with watching(board, claim) as reasons:
        await anyio.sleep(0.1)
        assert reasons == [], "watch_claim returned while the claim was current"
        await act()
    return reasons[0]
