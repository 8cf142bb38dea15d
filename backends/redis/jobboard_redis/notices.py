"""Claimable work and lost claims, told to one board alone: its session's notice list ``wk:<session>``.

A board whose ``wait()`` found nothing claimable is registered as waiting by the same ``peek`` call
(``wake.lua``); each script that makes a job claimable (a post, a release or abandon, a dependency's
consume, a requeue, a reaped session's claims, a due delayed job) wakes ONE registered board for it,
by pushing ``w<name>`` to that board's list. A call that ends another board's claim (a cancel, a settle
by another board) pushes ``l<job id>`` to the owner's list. The board pops its list with ``BLMPOP`` on a
connection of its own, only while some caller waits for work or watches a claim, and wakes ONE local
waiter per wake-up (one that asked for that name, else the first), so a process's claimers do not herd
on one post; a waiter that finds k jobs wakes up to k - 1 more of its board's waiters (work posted while
the board's registration was being renewed). Nothing here is needed for correctness: ``claim_next`` is exact, and a waiter peeks again
at least every :data:`POLL` seconds (a wake-up lost to a race or a failover costs that long at most).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Coroutine, Iterator
from typing import Any

import anyio

from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_redis.client import RedisClient
from jobboard_redis.session import Session
from jobboard_redis.view import BoardView

logger = logging.getLogger(__name__)

POLL = 1.0
"""Seconds an idle ``wait()`` sleeps at most before it peeks again."""
BLOCK = 1.0
"""Seconds one ``BLMPOP`` blocks (the loop then checks whether anyone still waits)."""


class Waiter:
    """One ``wait()`` call of this board: the names it asked for (``None``: any), its wake-up."""

    __slots__ = ("event", "names")

    def __init__(self, names: frozenset[str] | None) -> None:
        self.names = names
        self.event = anyio.Event()

    def wants(self, name: str) -> bool:
        return name in self.names if self.names is not None else not name.startswith("jobboard.")


class Notices:
    """This board's notice list and its local waiters; see the module docstring."""

    def __init__(self, client: RedisClient, session: Session, view: BoardView,
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self.client, self.session, self.view, self.spawn = client, session, view, spawn
        self.waiters: list[Waiter] = []
        self.watchers = 0
        self.received = 0
        """Notices popped so far (wake-ups and lost claims): what this board decodes to learn about work."""
        self._registration = 0
        self._registered_for: tuple[bool, tuple[str, ...]] | None = None
        self._running = False
        self._connected = True
        self._refused = False
        self.stopped = False

    @contextlib.contextmanager
    def waiting(self, names: Collection[str] | None) -> Iterator[Waiter]:
        """A ``wait()`` call's presence (the notice loop runs while any is here)."""
        waiter = Waiter(None if names is None else frozenset(names))
        self.waiters.append(waiter)
        self._start()
        try:
            yield waiter
        finally:
            self.waiters.remove(waiter)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """A ``watch_claim`` call's presence (the notice loop runs while any is here)."""
        self.watchers += 1
        self._start()
        try:
            yield
        finally:
            self.watchers -= 1

    def peek_args(self) -> list[str | int]:
        """``peek``'s session, registration, others, any, count and names: what this board waits for."""
        asking = [waiter.names for waiter in self.waiters]
        wanted = (any(names is None for names in asking),
                  tuple(sorted({name for names in asking if names is not None for name in names})))
        if wanted != self._registered_for:  # a new registration replaces the one for other names
            self._registered_for, self._registration = wanted, self._registration + 1
        return [self.session.id, str(self._registration), "1" if len(asking) > 1 else "0",
                "1" if wanted[0] else "0", len(wanted[1]), *wanted[1]]

    def wake_all(self) -> None:
        """Every local waiter peeks again (the board closed, the session changed, a notice may be lost)."""
        for waiter in self.waiters:
            waiter.event.set()

    def wake_more(self, count: int) -> None:
        """Wake up to ``count`` more local waiters (a waiter found that many more jobs than its own)."""
        for waiter in self.waiters:
            if count <= 0:
                return
            if not waiter.event.is_set() and waiter.names != frozenset():
                waiter.event.set()
                count -= 1

    def _start(self) -> None:
        if not self._running and not self.stopped:
            self._running = True
            self.spawn(self._run())

    async def _run(self) -> None:
        try:
            while not self.stopped and (self.waiters or self.watchers):
                await self._pop_once()
        finally:
            self._running = False

    async def _pop_once(self) -> None:
        key = f"{self.client.prefix}wk:{self.session.id}"
        try:
            items = await self.client.pop_notices(key, BLOCK)
        except BackendUnavailable as error:
            if self._connected:
                self._connected = False
                logger.info("notices of %s: %s", key, error)
            await anyio.sleep(0.1)
            return
        except JobBoardError as error:  # refused (an ACL without BLMPOP): waiters still peek every POLL
            if not self._refused:
                self._refused = True
                logger.error("notices of %s refused (waiting boards then find work within %g s): %s", key, POLL, error)
            await anyio.sleep(POLL)
            return
        if not self._connected:  # a notice popped as the connection failed is lost: everyone looks again
            self._connected = True
            self.wake_all()
            self.view.notify()
        self.received += len(items)
        for item in items:
            self._deliver(item)

    def _deliver(self, item: bytes) -> None:
        kind, rest = item[:1], item[1:].decode(errors="replace")
        if kind == b"l":
            self.view.notify(rest)
        elif kind == b"w":
            self._registration += 1  # the server took this board's registration off: a fresh one next time
            self._wake_one(rest)

    def _wake_one(self, name: str) -> None:
        """Wake one local waiter not woken yet: one that asked for ``name``, else the first (it re-registers)."""
        first = None
        for waiter in self.waiters:
            if waiter.event.is_set() or waiter.names == frozenset():
                continue
            if waiter.wants(name):
                waiter.event.set()
                return
            first = first or waiter
        if first is not None:
            first.event.set()
