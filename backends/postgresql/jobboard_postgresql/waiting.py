"""Waiting on a ``postgresql://`` board: ``wait()``, ``watch_claim()`` and ``wait_for_completion()``.

Nothing here polls the board on a fast clock. ``wait()`` looks once; finding nothing it marks its
session idle (one UPDATE), looks again (a post that committed before the mark is seen; a later one
chooses an idle session and NOTIFYs it), then sleeps until a NOTIFY on its session's channel, a write
of its own board, the next delayed job's due time, or ``idle_poll`` (the fallback, for a wake-up lost
to a race or a dropped connection). A wake-up nobody here waits for is passed on to another idle
session. ``watch_claim`` knows the claims its board made: it waits for its board's own settles, a
``c<job>`` NOTIFY (another board changed the claim), or a lost session, and asks the server only then
(or every :data:`WATCH_POLL` seconds for a claim another board made). ``wait_for_completion`` reads
the outcome after every consume or trash the event feed reports, and every second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection

import asyncpg

from jobboard.backend import Claim, Job, Outcome
from jobboard.errors import BoardClosed, JobBoardError
from jobboard_postgresql.database import Database
from jobboard_postgresql.reads import Reader
from jobboard_postgresql.session import Session
from jobboard_postgresql.writes import is_job_id

WATCH_POLL = 1.0
COMPLETION_POLL = 1.0


class Signal:
    """A broadcast: every waiter taken before :meth:`fire` wakes."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Event] = []

    def waiter(self) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters.append(event)
        return event

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def fire(self) -> None:
        waiters, self._waiters = self._waiters, []
        for event in waiters:
            event.set()


async def sleep_on(event: asyncio.Event, limit: float | None) -> None:
    with contextlib.suppress(TimeoutError):  # asyncio.timeout: no task of its own, one hop less on a wake-up
        async with asyncio.timeout(limit):
            await event.wait()


class Waiting:
    """The waits of one board; the backend feeds it what it learns (:meth:`work`, :meth:`changed`, ...)."""

    def __init__(self, db: Database, reader: Reader, board: str, schema: str, idle_poll: float,
                 is_open: Callable[[], bool], session: Callable[[], Session]) -> None:
        self.db, self.reader, self.board, self.s = db, reader, board, f'"{schema}"'
        self.idle_poll = idle_poll
        self._is_open, self._session = is_open, session
        self.work_signal = Signal()
        """Fired by this board's writes that may make a job claimable, and by a ``w`` NOTIFY."""
        self.claim_signal = Signal()
        """Fired when one of the claims this board holds may have changed."""
        self.outcome_signal = Signal()
        self.held: dict[str, tuple[int, int]] = {}
        """Claims this board made and believes current: job id -> (generation, session id)."""
        self.expired: set[tuple[str, int]] = set()
        """Claims lost with a session: (job id, generation)."""
        self.completion_waiters = 0

    # -- what the backend tells -------------------------------------------------

    def claimed(self, claim: Claim, session_id: int) -> None:
        """A claim this board made under ``session_id`` (lost already if that session is)."""
        if session_id != self._session().id or self._session().lost:
            self.expired.add((claim.job.id, claim.generation))
        else:
            self.held[claim.job.id] = (claim.generation, session_id)

    def settled(self, job_id: str) -> None:
        self.held.pop(job_id, None)
        if self.expired:  # a settle attempt ends what a watch of the lost claim could say
            self.expired = {lost for lost in self.expired if lost[0] != job_id}
        self.claim_signal.fire()

    def changed(self, job_id: str) -> None:
        """Another board changed ``job_id`` (a ``c`` NOTIFY, or the event feed)."""
        if job_id in self.held:
            self.held.pop(job_id)
            self.claim_signal.fire()

    def session_lost(self, session_id: int) -> None:
        for job_id, (generation, holder) in list(self.held.items()):
            if holder == session_id:
                self.expired.add((job_id, generation))
                del self.held[job_id]
        self.wake_all()

    def wake_all(self) -> None:
        self.work_signal.fire()
        self.claim_signal.fire()
        self.outcome_signal.fire()

    def work(self) -> bool:
        """A ``w`` NOTIFY (or our own write): wake the local waiters; ``False`` if nobody here waits."""
        waiting = self.work_signal.waiting > 0
        self.work_signal.fire()
        return waiting

    # -- waits ------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if not self._is_open():
            raise BoardClosed(f"board {self.board} is closed")

    async def _guarded(self, read: Callable[[], Awaitable[object]]) -> object:
        try:
            return await read()
        except JobBoardError:
            self._ensure_open()  # a read cut by our own close: BoardClosed, not the pool's error
            raise

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        while True:
            self._ensure_open()
            woken = self.work_signal.waiter()
            jobs, due = await self._claimable(names)
            if not jobs and not self._session().idle:
                await self._session().set_idle(True)
                jobs, due = await self._claimable(names)
            if jobs:
                if self.work_signal.waiting <= 1:
                    self._session().clear_idle()  # written behind our return, ordered before any later mark
                return jobs
            await sleep_on(woken, self.idle_poll if due is None else min(due + 0.001, self.idle_poll))

    async def _claimable(self, names: Collection[str] | None) -> tuple[list[Job], float | None]:
        found = await self._guarded(lambda: self.reader.claimable(names))
        return found  # type: ignore[return-value]

    async def watch_claim(self, claim: Claim) -> str:
        while True:
            if not self._is_open():
                return "board closed"
            if (claim.job.id, claim.generation) in self.expired:
                return "session expired"
            changed = self.claim_signal.waiter()
            held = self.held.get(claim.job.id)
            if held is not None and held[0] == claim.generation:
                await changed.wait()
                continue
            try:
                reason = await self.why_lost(claim)
            except JobBoardError:
                if not self._is_open():
                    return "board closed"
                reason = None
            if reason is not None:
                return reason
            await sleep_on(changed, WATCH_POLL)

    async def why_lost(self, claim: Claim) -> str | None:
        """Why ``claim`` is not current, from the server; ``None`` while it is."""
        if not is_job_id(claim.job.id):
            return "consumed"

        async def call(connection: asyncpg.Connection, retry: bool) -> asyncpg.Record | None:
            return await connection.fetchrow(
                f"SELECT 'job' AS place, state, gen FROM {self.s}.job WHERE id = $1 UNION ALL "
                f"SELECT 'trash', NULL, NULL FROM {self.s}.trash WHERE id = $1", int(claim.job.id))

        row = await self.db.run("watch_claim", call)
        if row is None:
            return "consumed"
        if row["place"] == "trash":
            return "trashed"
        if row["gen"] != claim.generation:
            return "claimed again" if row["state"] == 1 else "released"
        return None if row["state"] == 1 else "released"

    async def wait_for_completion(self, job_id: str, start_feed: Callable[[], None]) -> Outcome:
        self.completion_waiters += 1
        start_feed()
        try:
            while True:
                self._ensure_open()
                changed = self.outcome_signal.waiter()
                outcome = await self._guarded(lambda: self.reader.outcome(job_id))
                if outcome is not None:
                    return outcome  # type: ignore[return-value]
                await sleep_on(changed, COMPLETION_POLL)
        finally:
            self.completion_waiters -= 1
