"""``wait``, ``wait_for_completion``, ``watch_claim`` and the event reader of one board.

``wait`` reads first (no write when there is work); when there is none it marks its session waiting in
the ``BEGIN IMMEDIATE`` transaction that finds none, so no post can slip between the look and the
mark, and sleeps until its doorbell rings (a poster popped it), a board of this process commits, the
next delayed job is due, or the slow poll sees another process commit. Leaving without being popped
clears the mark (a write queued without waiting, so a cancelled caller clears it too).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

import anyio

from jobboard.backend import Claim, Event, EventKind, Job, Outcome
from jobboard.errors import BoardClosed, JobBoardError
from jobboard_sqlite import reads, sessions
from jobboard_sqlite.rows import Effects

if TYPE_CHECKING:
    from jobboard_sqlite.backend import SqliteBackend

KINDS = {kind.value: kind for kind in EventKind}


class Waiting:
    """The waits of one board (see the module docstring)."""

    def __init__(self, backend: SqliteBackend) -> None:
        self.backend = backend
        self._tailing = False
        self._cursor = 0

    def _closed(self) -> BoardClosed:
        return BoardClosed(f"board {self.backend.url} closed while waiting")

    @contextlib.contextmanager
    def _polled(self, fast: bool) -> Iterator[None]:
        """While a caller waits: the fallback poll runs (every 50 ms with ``fast``)."""
        signals = self.backend.signals
        if fast:
            signals.fast += 1
        else:
            signals.waiting += 1
        signals.kick()
        try:
            yield
        finally:
            if fast:
                signals.fast -= 1
            else:
                signals.waiting -= 1

    def _change(self) -> anyio.Event:
        """The next change (taken before the caller looks). :raises BoardClosed: the board closed."""
        change = self.backend.signals.change()
        if not self.backend.is_open:
            raise self._closed()
        return change

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        """Jobs not held back by flow control. While flow control holds back the only ready jobs, the
        fallback poll runs every 50 ms (a permit back, a limit changed or a pause lifted in another
        process rings no doorbell), and a rate's next permit is a due time like a delayed job's."""
        marked: list[float] = []
        try:
            with self._polled(fast=False):
                while True:
                    change = self._change()
                    found = await self._look(names, marked)
                    if found.jobs:
                        return found.jobs
                    timeout = float("inf") if found.due is None else max(0.0, found.due - time.time()) + 0.001
                    with anyio.move_on_after(timeout), self._held(found.held):
                        await change.wait()
        finally:
            if marked and self.backend.is_open:
                self._unmark(marked[-1])

    @contextlib.contextmanager
    def _held(self, held: bool) -> Iterator[None]:
        if not held:
            yield
            return
        with self._polled(fast=True):
            yield

    async def _look(self, names: Collection[str] | None, marked: list[float]) -> reads.Claimable:
        """The claimable jobs (and when the next delayed one is due): a read, then (when it found none) the
        same look in a write transaction that marks this session waiting (the mark appended to ``marked``)."""
        backend = self.backend
        malformed: list[str] = []
        found = await backend._read(lambda conn: reads.claimable(conn, backend.scope, names, time.time(), malformed))
        if not found.jobs:

            def look_and_mark(conn: sqlite3.Connection, fx: Effects) -> reads.Claimable:
                result = reads.claimable(conn, backend.scope, names, time.time(), malformed)
                if not result.jobs:
                    marked.append(sessions.set_waiting(conn, backend.scope, names))
                return result

            found = await backend._write(look_and_mark)
        for job_id in malformed:
            backend.report_malformed(job_id)
        return found

    def _unmark(self, mark: float) -> None:
        backend = self.backend
        try:
            cleared = backend.db.enqueue(lambda: backend.db.write(lambda conn: sessions.clear_waiting(conn, backend.scope, mark)))
        except RuntimeError:
            return  # no running loop: closing
        cleared.add_done_callback(lambda done: None if done.cancelled() else done.exception())

    async def wait_for_completion(self, job_id: str) -> Outcome:
        backend = self.backend
        with self._polled(fast=True):
            while True:
                change = self._change()
                outcome = await backend._read(lambda conn: reads.outcome(conn, backend.scope, job_id, time.time()))
                if outcome is not None:
                    return outcome
                await change.wait()

    async def watch_claim(self, claim: Claim) -> str:
        backend, signals = self.backend, self.backend.signals
        signals.waiting += 1
        try:
            while True:
                event = signals.watch(claim.job.id)
                try:
                    if not backend.is_open:
                        return "board closed"
                    reason = await backend._read(lambda conn: reads.lost_because(conn, backend.scope, claim))
                    if reason is not None:
                        return reason
                    await event.wait()
                finally:
                    signals.unwatch(claim.job.id, event)
        finally:
            signals.waiting -= 1

    def observed(self) -> None:
        """A subscriber came: the boards of this process log their events from now on, those of other
        processes from their next upkeep (within ``reap_interval``); read the log from now on."""
        backend = self.backend
        if self._tailing or backend._watch is None:
            return
        self._observe_locally()
        try:
            self._cursor = int(backend._watch.execute("SELECT coalesce(max(id), 0) FROM jb_event").fetchone()[0])
        except sqlite3.Error:
            self._cursor = -1  # unknown: every event in the log is read, and no loss is inferred before it
        self._tailing = True
        backend.signals.fast += 1
        backend.signals.kick()
        backend.services.spawn(self._tail(), name="jobboard-sqlite-events")

    def _observe_locally(self) -> None:
        for board in self.backend.local_boards():
            board.scope.log_events = True
            board.runtime.observed_until = time.monotonic() + sessions.OBSERVED_FOR

    def _pruned_unread(self, oldest: int | None) -> None:
        """Publish ``DROPPED`` when the file's log was pruned past this reader's cursor (it fell more than the
        log's length behind): the count is an upper bound (the log holds every board of the file)."""
        if oldest is None or self._cursor < 0 or oldest <= self._cursor + 1:
            return
        lost = oldest - self._cursor - 1
        self._cursor = oldest - 1
        self.backend.hub.publish(Event(EventKind.DROPPED, count=lost, detail=(
            f"at most {lost} events were pruned from the file's log (it keeps the last {sessions.EVENTS_KEPT}) "
            "before this reader read them")))

    async def _tail(self) -> None:
        backend, signals = self.backend, self.backend.signals
        refreshed = 0.0
        try:
            while backend.is_open and backend.hub.has_subscribers:
                if time.monotonic() - refreshed > sessions.OBSERVED_FOR / 3:
                    refreshed = time.monotonic()
                    self._observe_locally()
                    await backend._write(lambda conn, fx: sessions.observe(conn, backend.scope))
                change = signals.change()
                try:
                    oldest, newest, rows = await backend._read(functools.partial(
                        sessions.events_after, scope=backend.scope, after=self._cursor))
                except JobBoardError:
                    oldest, newest, rows = None, None, []
                self._pruned_unread(oldest)
                for event_id, session, kind, job_id, detail in rows:
                    self._cursor = event_id
                    if session != backend.scope.session:
                        backend.hub.publish(Event(KINDS[kind], job_id, detail))
                if newest is not None and len(rows) < sessions.EVENTS_READ:  # read up to the newest: other
                    self._cursor = max(self._cursor, newest)  # boards' events past ours are not a loss when pruned
                if not rows:
                    await change.wait()
        finally:
            self._tailing = False
            signals.fast -= 1
