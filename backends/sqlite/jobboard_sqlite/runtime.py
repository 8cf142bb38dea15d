"""One board's session: its lock file, its doorbell, its row, and the upkeep every board does.

The upkeep runs every ``reap_interval`` seconds: it probes the other sessions' lock files (a dead
owner's claims go back on the board at once), notices this session's own end (its row deleted by
another board after a stop longer than the session timeout, or its lock file removed) and starts a
new one, and every few seconds deletes what expired. It also notices the database file deleted or
replaced under the board (:attr:`Runtime.gone`): the board's calls then raise ``BoardClosed``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio

from jobboard.backend import Event, EventKind
from jobboard.errors import JobBoardError
from jobboard_sqlite import files, sessions, trash, writes
from jobboard_sqlite.database import TRUNCATE_OVER, Database
from jobboard_sqlite.files import SessionLock
from jobboard_sqlite.options import SqliteOptions
from jobboard_sqlite.rows import Effects, Scope
from jobboard_sqlite.wake import Doorbell

logger = logging.getLogger("jobboard_sqlite")

TRUNCATE_BACKOFF = 0.5
"""Seconds before a truncating checkpoint that found readers is tried again (doubling up to 8 s)."""
WARN_FRAMES = 65536
"""A WAL this many pages long that cannot be checkpointed is warned about (256 MB of 4 KB pages)."""
SWEEP_EVERY = 5.0
"""Seconds between two sweeps of expired results, trash, keys and old events by one board."""


class Runtime:
    """The session of one board and its upkeep (see the module docstring)."""

    def __init__(self, options: SqliteOptions, db: Database, scope: Scope,
                 apply: Callable[[Effects], None], on_ring: Callable[[], None],
                 publish: Callable[[Event], None]) -> None:
        self.options, self.db, self.scope = options, db, scope
        self._apply, self._on_ring, self._publish = apply, on_ring, publish
        self.lock: SessionLock | None = None
        self.doorbell: Doorbell | None = None
        self._last_sweep = 0.0
        self.reaped = 0
        self.observed_until = 0.0
        """(Monotonic) until when a reader of this process reads the board's event log (this board logs)."""
        self._truncate_after = 0.0
        self._truncate_backoff = TRUNCATE_BACKOFF
        self._warned_at = 0.0
        self._wal_mark = (-1, -1)
        self.active = False
        """Between :meth:`start` and :meth:`stop` (the upkeep does nothing outside)."""
        self.entities: dict[str, bytes] = {}
        """The entities this board registered (name: encoded metadata): a new session registers them again."""
        self.file: tuple[int, int] | None = None
        """``(st_dev, st_ino)`` of the database file when the board opened it (see :meth:`watch_file`)."""
        self.gone: str | None = None
        """Why the board is no longer on its file (deleted or replaced under it), once noticed."""
        self._renewing = asyncio.Lock()
        """Held by :meth:`renew` and :meth:`stop`: one session at a time, whoever notices its end first."""

    def lock_path(self, session: str) -> Path:
        return files.sessions_dir(self.options.path) / f"{session}.lock"

    async def start(self) -> None:
        """A new session: the lock first, then the doorbell, then the row (a row always has its lock).

        ``scope.session`` names the new session from the transaction that wrote its row (so a call run on
        the connection's thread never sees a session without its row); on failure it is left as it was.
        The board's :attr:`entities` are registered again in that transaction.
        :raises BackendUnavailable: the lock file or the row cannot be written (nothing is left behind).
        """
        session = uuid.uuid4().hex
        lock = SessionLock(self.lock_path(session), self.options.session_timeout)
        lock.acquire()
        doorbell = Doorbell(session, self._on_ring)
        before, entities = self.scope.session, dict(self.entities)

        def begin(conn: sqlite3.Connection, fx: Effects) -> None:
            sessions.start(conn, self.scope.board, session, str(lock.path), doorbell.address, entities)
            self.scope.session = session

        try:
            doorbell.open()
            await self.write(begin)
        except BaseException:
            self.scope.session = before
            doorbell.close()
            lock.release()
            raise
        self.lock, self.doorbell = lock, doorbell
        self.active = True

    async def stop(self) -> None:
        """End the session: its claims go back, its entities and row go, the lock is dropped. Shielded:
        a caller's cancellation waits for it (and for a renewal under way, whose session it then ends)."""
        self.active = False
        with anyio.CancelScope(shield=True):
            async with self._renewing:
                try:
                    await self.write(lambda conn, fx: sessions.end(conn, self.scope, self.scope.session,
                                                                  "owner {} closed its board", fx))
                finally:
                    self._drop()

    def _drop(self) -> None:
        if self.doorbell is not None:
            self.doorbell.close()
        if self.lock is not None:
            self.lock.release()
        self.doorbell = self.lock = None

    async def renew(self, old: str) -> None:
        """Session ``old`` was ended by another board (or its lock file went): say so (``SESSION_EXPIRED``)
        and start a new one. Whoever noticed it (the upkeep, every claimer that met its end) calls this with
        the session it saw ended: one renewal runs at a time, and a call for a session already replaced (or
        after :meth:`stop`) does nothing. :raises BackendUnavailable: the new session cannot be started (the
        next call tries again)."""
        async with self._renewing:
            if not self.active or self.scope.session != old:
                return
            logger.warning("session %s of %s ended (stopped past its timeout, or its lock file went); starting a "
                           "new one", old, self.options.path)
            await self.write(lambda conn, fx: sessions.end(conn, self.scope, old, "owner {}'s session ended", fx))
            self._drop()
            await self.start()
            self._publish(Event(EventKind.SESSION_EXPIRED, None, f"session {old} ended; claims lost"))

    def write_sync(self, body: Callable[[sqlite3.Connection, Effects], object]) -> tuple[object, Effects]:
        """Run ``body`` and the write's last step in one transaction (on the connection's thread)."""

        def transaction(conn: sqlite3.Connection) -> tuple[object, Effects]:
            fx = Effects()
            result = body(conn, fx)
            sessions.finish(conn, self.scope, fx)
            return result, fx

        return self.db.write(transaction)

    async def write(self, body: Callable[[sqlite3.Connection, Effects], object]) -> object:
        result, fx = await self.db.run(lambda: self.write_sync(body))
        self._apply(fx)
        return result

    async def upkeep(self, watch: sqlite3.Connection) -> None:
        """Run until cancelled (see the module docstring); failures are logged and tried again."""
        while True:
            await anyio.sleep(self.options.reap_interval)
            try:
                await self.tick(watch)
            except (JobBoardError, RuntimeError, sqlite3.Error, OSError) as error:  # a full disk: go on
                if not self.active:
                    return  # the board is closing: its connection and thread go
                logger.warning("upkeep of %s failed: %s", self.options.path, error)

    async def tick(self, watch: sqlite3.Connection) -> None:
        lock, session = self.lock, self.scope.session
        if not self.active or self.gone is not None or self.file_gone():
            return
        if lock is None or lock.lost.is_set() or not await self.db.run(
                lambda: self.db.read(lambda c: sessions.alive(c, self.scope))):
            await self.renew(session)
            return
        try:
            listed = sessions.others(watch, self.scope)
            self.scope.log_events = time.monotonic() < self.observed_until or sessions.observed(watch, self.scope)
        except sqlite3.Error:
            return
        for session in listed:
            await self._probe(session, self.lock_path(session))  # this process's view of the file's directory
        if self._wal_changed():
            await asyncio.wrap_future(self.db.submit(self._checkpoint))
        if time.monotonic() - self._last_sweep > SWEEP_EVERY:
            self._last_sweep = time.monotonic()
            await self.write(self._sweep)

    def watch_file(self) -> None:
        """Remember which file the board opened (right after its connection opened it)."""
        info = os.stat(self.options.path)
        self.file = (info.st_dev, info.st_ino)

    def file_gone(self) -> bool:
        """Whether the database file was deleted or replaced since :meth:`watch_file` (``stat`` only: never
        opened here). The first time, say why in :attr:`gone`, log it and wake the board's waiters (their
        next look raises ``BoardClosed``)."""
        try:
            info = os.stat(self.options.path)
            now: tuple[int, int] | None = (info.st_dev, info.st_ino)
        except FileNotFoundError:
            now = None
        except OSError:
            return False  # cannot tell (a permission changed): not taken for gone
        if self.file is None or now == self.file:
            return False
        self.gone = (f"{self.options.path} was {'deleted' if now is None else 'replaced by another file'} under "
                     "this board: its calls would go on in the old file, which no other process sees; open the "
                     "board again")
        logger.error("%s", self.gone)
        self._on_ring()
        return True

    async def _probe(self, session: str, path: Path) -> None:
        dead, fd = files.probe(path, self.options.session_timeout)
        if not dead:
            return
        try:
            ended = await self.write(lambda conn, fx: sessions.end(conn, self.scope, session,
                                                                  "owner {}'s session ended", fx))
        finally:
            files.drop_dead(path, fd)
        if ended:
            self.reaped += 1
            logger.info("session %s of %s was dead: its claims are back on the board", session, self.options.path)

    def _wal_changed(self) -> bool:
        """Whether the ``-wal`` file changed since the last look (``stat`` only: it is never opened here)."""
        try:
            info = os.stat(f"{self.options.path}-wal")
            mark = (info.st_size, info.st_mtime_ns)
        except OSError:
            mark = (0, 0)
        changed, self._wal_mark = mark != self._wal_mark, mark
        return changed

    def _checkpoint(self) -> None:
        """(On the connection's thread.) A passive checkpoint; past :data:`TRUNCATE_OVER` frames a truncating
        one, tried again after a growing pause while readers keep it from passing (warned about)."""
        now = time.monotonic()
        truncating = now >= self._truncate_after
        try:
            busy, frames, _ = self.db.checkpoint(TRUNCATE_OVER if truncating else 1 << 62)
        except sqlite3.Error as error:
            logger.debug("checkpoint of %s: %s", self.options.path, error)
            return
        if not (truncating and frames > TRUNCATE_OVER and busy):
            self._truncate_backoff = TRUNCATE_BACKOFF
            return
        self._truncate_after = now + self._truncate_backoff
        self._truncate_backoff = min(self._truncate_backoff * 2, 8.0)
        if frames > WARN_FRAMES and now - self._warned_at > 60:
            self._warned_at = now
            logger.warning("the WAL of %s holds %d pages and cannot be checkpointed: a reader keeps a transaction "
                           "open (checkpoint starvation); it shrinks once that reader ends", self.options.path, frames)

    def _sweep(self, conn: sqlite3.Connection, fx: Effects) -> None:
        now = time.time()
        trash.sweep(conn, self.scope, now)
        sessions.prune_events(conn)
        orphans = conn.execute("SELECT seq, owner FROM jb_job WHERE board=? AND state=1 AND session NOT IN"
                               " (SELECT id FROM jb_session)", (self.scope.board,)).fetchall()
        for seq, owner in orphans:
            writes.release(conn, self.scope, seq, None, f"owner {owner}'s session ended", fx)
