"""What a board lends its backend (:class:`BoardServices`): the event hub, skip-and-report, background tasks.
Re-exported by :mod:`jobboard.backend`."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Collection, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from jobboard.board.events import Event, EventHub, EventKind

logger = logging.getLogger("jobboard.board")
_BATCH: ContextVar[set[str] | None] = ContextVar("jobboard_held_back_batch", default=None)
"""The whys passed over within :meth:`BoardServices.counting_once` (its task's; ``None`` outside one)."""


class BoardServices:
    """What a board lends its backend: the event hub, skip-and-report, background tasks (one per board; a
    backend wrapper hands its inner backend the same one)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.hub = EventHub()
        """The board's event fan-out: the backend publishes, ``JobBoard.events`` subscribes."""
        self.reported: set[str] = set()
        """Malformed entries already reported (each is reported once per board)."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.held_back: Counter[str] = Counter()
        """Claims flow control refused or passed over on this board, by ``why`` (``JobBoard.held_back``)."""

    def passed_over(self, whys: Iterable[str]) -> None:
        """A claim passed over jobs held back for ``whys``: each counts once in :attr:`held_back` (within
        :meth:`counting_once`, once for the whole block). No I/O."""
        batch = _BATCH.get()
        if batch is not None:
            batch.update(whys)
        else:
            self.held_back.update(set(whys))

    @contextmanager
    def counting_once(self) -> Iterator[None]:
        """Within: what the claims made pass over counts once per why, at the end (one call of a board that
        is several claims: the interface's ``claim_many``, a spread board's ``claim_next``). Nested: the
        outermost counts."""
        if _BATCH.get() is not None:
            yield
            return
        whys: set[str] = set()
        token = _BATCH.set(whys)
        try:
            yield
        finally:
            _BATCH.reset(token)
            self.held_back.update(whys)

    def report_malformed(self, job_id: str, what: str = "not a valid posting") -> None:
        """Skip-and-report: log ``job_id`` once and publish one ``MALFORMED`` event."""
        if job_id not in self.reported:
            self.reported.add(job_id)
            logger.warning("skipping malformed entry %s on %s", job_id, self.url)
            self.hub.publish(Event(EventKind.MALFORMED, job_id, what))

    def spawn(self, work: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
        """Run ``work`` in the background until it ends or :meth:`cancel_tasks` (a strong reference is kept)."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_tasks(self) -> None:
        """Cancel every background task and wait for them to end."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await wait_ended(tasks)


async def wait_ended(tasks: Collection[asyncio.Future[Any]]) -> None:
    """Wait for ``tasks`` (cancelled or not) to end, their outcomes retrieved; a cancellation of the caller ends
    the wait at once with the caller's own ``CancelledError`` (the tasks end in the background).

    Not ``asyncio.gather(..., return_exceptions=True)``: cancelled while it waits, gather raises the
    ``CancelledError`` of its last task (Python 3.11-3.12), not the caller's, so an anyio cancel scope
    (``move_on_after``, ``fail_after``) does not take it as its own and lets it out: the caller's task ends as
    cancelled, and a task group cancels all its tasks without an error."""
    for task in tasks:
        task.add_done_callback(_retrieved)
    if tasks:
        await asyncio.wait(tasks)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A task's outcome taken (one that ends in the background is not reported as never retrieved)."""
    if not task.cancelled():
        task.exception()
