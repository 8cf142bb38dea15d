"""In-process signals of one board: who waits for what, and the fallback poll.

``changed`` wakes ``wait``, ``wait_for_completion`` and the event reader (rung by another session,
a commit by a board of this process on the same file, or the fallback poll seeing another process's
commit). ``watchers`` wake ``watch_claim`` per job: only this board's own writes to that job, a ring
(another session took a claim of ours away), a new session or the close wake them, never every commit.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable

import anyio

FAST_POLL = 0.05
"""Seconds between polls of ``PRAGMA data_version`` while someone waits for an outcome or reads events."""


class Signals:
    """One board's waiters (see the module docstring)."""

    def __init__(self) -> None:
        self._changed: list[anyio.Event] = []
        self._watchers: defaultdict[str, list[anyio.Event]] = defaultdict(list)
        self.fast = 0
        """How many callers want the fast poll (``wait_for_completion``, an event reader)."""
        self.waiting = 0
        """How many callers wait at all (the poll runs only then)."""
        self._poke = anyio.Event()

    def change(self) -> anyio.Event:
        """An event set at the next change; take it *before* checking a condition."""
        event = anyio.Event()
        self._changed.append(event)
        return event

    def watch(self, job_id: str) -> anyio.Event:
        """An event set when ``job_id``'s claim may have changed; take it before checking."""
        event = anyio.Event()
        self._watchers[job_id].append(event)
        return event

    def unwatch(self, job_id: str, event: anyio.Event) -> None:
        events = self._watchers.get(job_id)
        if events is not None:
            if event in events:
                events.remove(event)
            if not events:
                del self._watchers[job_id]

    def changed(self) -> None:
        events, self._changed = self._changed, []
        for event in events:
            event.set()

    def touched(self, job_ids: Iterable[str | None]) -> None:
        """This board wrote these jobs: wake their watchers."""
        for job_id in job_ids:
            for event in self._watchers.pop(job_id, ()) if job_id is not None else ():
                event.set()

    def everything(self) -> None:
        """A ring, a new session, the close: wake every waiter and watcher."""
        self.changed()
        watchers, self._watchers = self._watchers, defaultdict(list)
        for events in watchers.values():
            for event in events:
                event.set()

    async def poll(self, conn: sqlite3.Connection, slow: float) -> None:
        """Run until cancelled: while anyone waits, read ``PRAGMA data_version`` every ``slow`` seconds
        (``FAST_POLL`` while someone wants it) and wake everyone when another connection committed.
        A poll that starts (someone began to wait) takes the version as it is then: it wakes nobody."""
        last = None
        while True:
            if not self.waiting and not self.fast:
                last = None
                self._poke = anyio.Event()
                await self._poke.wait()
            if last is None:
                last = self._version(conn)
            fast = bool(self.fast)
            with anyio.move_on_after(FAST_POLL if fast else slow):
                self._poke = anyio.Event()
                await self._poke.wait()
            if fast != bool(self.fast) and self.fast:
                continue  # asked to poll fast: start the shorter period now
            version = self._version(conn)
            if version is not None and version != last:
                last = version
                self.everything()

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int | None:
        try:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None

    def kick(self) -> None:
        """Someone started waiting (or wants the fast poll): let the poll see it."""
        self._poke.set()
