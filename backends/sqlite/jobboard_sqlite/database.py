"""One board's connection; every write one ``BEGIN IMMEDIATE`` transaction.

``SQLITE_BUSY`` (the write lock held past the busy timeout, or a checkpoint in the way) is retried, the
whole transaction again, until the URL's ``busy_timeout`` has passed: never fatal, and never reported as a
failure of a write that applied (a ``COMMIT`` that failed busy is committed again, not re-run).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jobboard.errors import BackendUnavailable, BoardConflict, JobBoardError
from jobboard_sqlite import files
from jobboard_sqlite.calls import Busy, Calls, Withdrawn
from jobboard_sqlite.schema import SCHEMA_VERSION, connect

logger = logging.getLogger("jobboard_sqlite")
BACKOFF_DOUBLINGS = 5
"""A busy write's sleep doubles this many times from 0.1 ms, then stays at its 2 ms cap."""
T = TypeVar("T")


def failure(error: sqlite3.Error, path: Path) -> JobBoardError:
    """The one-line error for a failure of the file: ``BoardConflict`` when retrying cannot help (not a
    database, read-only), ``BackendUnavailable`` otherwise (disk full, cannot open, locked too long)."""
    text = describe(error, path)
    permanent = ("not a jobboard" in text or "is read-only" in text or "schema version" in text
                 or "is a directory, not a board file" in text)
    return BoardConflict(text) if permanent else BackendUnavailable(text)


def describe(error: sqlite3.Error, path: Path) -> str:
    """One line saying what is wrong with the file."""
    text = str(error)
    if "but not a jobboard board" in text:
        return f"{path} is {text}"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a jobboard SQLite database ({text})"
    if "readonly" in text or "read-only" in text or "attempt to write" in text:
        return f"{path} is read-only ({text}): a sqlite:// board needs to write its file and its directory"
    if "disk is full" in text or "SQLITE_FULL" in text:
        return f"the disk holding {path} is full ({text})"
    if "schema version" in text:
        return f"{path}: {text}"
    if "unable to open" in text:
        return _unopenable(path, text)
    return f"{path}: {text}"


def _unopenable(path: Path, text: str) -> str:
    """Why SQLite could not open ``path``: a directory or a read-only file system are said so (permanent: see
    :func:`failure`); anything else may pass (a directory made later, a mount coming back)."""
    if path.is_dir():
        return f"{path} is a directory, not a board file ({text}): name a file in it"
    directory = path.parent
    try:
        read_only = directory.is_dir() and bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"{path} is read-only ({text}): its file system is mounted read-only; a sqlite:// board needs to write"
    return f"cannot open {path} ({text}): does its directory exist and is it writable?"


def is_busy(error: sqlite3.Error) -> bool:
    text = str(error)
    return "locked" in text or "busy" in text


TRUNCATE_OVER = 4096
"""Frames (pages) in the WAL past which a fully checkpointed WAL is truncated (16 MB of 4 KB pages)."""


class Database:
    """One connection and its transactions; :class:`~jobboard_sqlite.calls.Calls` decides where they run
    (inline on the event loop, or on the connection's thread) and holds the file's write turn.

    SQLite's own busy handler is off (``timeout=0``): a busy transaction is rolled back and run again
    after a short random sleep, on the thread, for up to ``retry_for`` seconds.
    """

    def __init__(self, path: Path, retry_for: float, synchronous: str) -> None:
        self.path, self.retry_for, self.synchronous = path, retry_for, synchronous
        self.calls = Calls()
        self.conn: sqlite3.Connection | None = None
        self.busy_retries = 0
        self._shut = False
        self._retries = 0

    async def open(self) -> None:
        """:raises BackendUnavailable: the file cannot be opened as a board (one line saying why)."""
        await asyncio.wrap_future(self.calls.submit(self._connect))

    def _connect(self) -> None:
        try:
            self.conn = connect(str(self.path), self.synchronous)
        except sqlite3.Error as error:
            raise failure(error, self.path) from error
        self.calls.turn_fd = files.open_turn(self.path)

    async def close(self) -> None:
        """Close the connection (on its thread), then give the write turn back, close its descriptor and let
        the thread go (:meth:`_closed`). A caller cancelled meanwhile gets its cancellation at once, and the
        rest follows the connection's close all the same (nothing is left open)."""
        if self.conn is None:
            self._closed()
            return
        closing = asyncio.wrap_future(self.calls.submit(self._close))
        closing.add_done_callback(self._closed)
        await asyncio.shield(closing)
        self._closed()

    def _closed(self, closing: asyncio.Future[None] | None = None) -> None:
        """(Loop, once the connection closed.) Idempotent."""
        if closing is not None and not closing.cancelled():
            closing.exception()  # retrieved: raised to the caller, if it still waited
        if self._shut:
            return
        self._shut = True
        self.calls.closed()
        self.calls.executor.shutdown(wait=False)

    def _close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def submit(self, work: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``work`` on the connection's thread (thread-safe, does not wait)."""
        return self.calls.submit(work)

    def enqueue(self, work: Callable[[], T], orphan: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """(Loop.) See :meth:`Calls.enqueue`: ``work`` may write once, as its first step."""
        return self.calls.enqueue(work, orphan)

    async def run(self, work: Callable[[], T]) -> T:
        """Run ``work`` inline or queued (see :mod:`~jobboard_sqlite.calls`) and wait."""
        return await self.calls.run(work)

    def write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction, retried while busy (see the class), holding
        the file's write turn (an ``flock`` the boards of every process take first: see
        :mod:`~jobboard_sqlite.calls`).

        ``body`` must be safe to run again from the start (a rolled-back attempt changed nothing).
        :raises BackendUnavailable: still busy after ``retry_for`` seconds, or an I/O error (disk full...).
        """
        self.calls.take_turn()
        return self._write(body)

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn()
        deadline = time.monotonic() + self.retry_for
        self._retries = 0
        while True:
            self._unless_withdrawn()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                self._retry_or_raise(error, deadline)
                continue
            try:
                self._check_version(conn)
                result = body(conn)
            except JobBoardError:
                self._rollback(conn)
                raise
            except sqlite3.Error as error:
                self._rollback(conn)
                self._retry_or_raise(error, deadline)
                continue
            except BaseException:
                self._rollback(conn)
                raise
            self._commit(conn, deadline)
            return result

    def read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one read transaction (a consistent snapshot), retried while busy."""
        conn = self._conn()
        deadline = time.monotonic() + self.retry_for
        while True:
            self._unless_withdrawn()
            try:
                conn.execute("BEGIN")
                try:
                    self._check_version(conn)  # a file upgraded under this process: refused, not misread
                    return body(conn)
                finally:
                    self._rollback(conn)
            except sqlite3.Error as error:
                if not is_busy(error):
                    with contextlib.suppress(sqlite3.Error):  # (no transaction: the header read on its own)
                        self._check_version(conn)
                self._retry_or_raise(error, deadline)

    def _unless_withdrawn(self) -> None:
        """:raises Withdrawn: the caller of this call (on the thread, retried while busy) was cancelled: nothing of
        it applied, and it is given up rather than applied after its caller was told it failed."""
        if self.calls.withdrawn():
            raise Withdrawn(f"a call on {self.path} given up: its caller was cancelled")

    def _check_version(self, conn: sqlite3.Connection) -> None:
        """:raises BoardConflict: the file's schema version is not this jobboard's (upgraded
        under this process by a newer one): a permanent condition, not a retried ``BackendUnavailable``."""
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            raise BoardConflict(f"{self.path} was changed to schema version {version} while this process had it open "
                                f"(this jobboard knows {SCHEMA_VERSION}): restart it with the jobboard that changed it")

    def checkpoint(self, truncate_over: int = TRUNCATE_OVER, wait: float = 0.2) -> tuple[int, int, int]:
        """(On the connection's thread.) ``PRAGMA wal_checkpoint(PASSIVE)``; a WAL of more than
        ``truncate_over`` frames is then checkpointed with ``TRUNCATE``, which holds the write lock and
        waits up to ``wait`` seconds for the readers of the WAL to finish (readers that never stop starve
        every checkpoint: the WAL can only grow while one holds a transaction open).
        Returns (busy, frames in the WAL, frames copied back)."""
        conn = self._conn()
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames > truncate_over:
            conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            try:
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute("PRAGMA busy_timeout=0")
        return int(busy), int(frames), int(copied)

    def _commit(self, conn: sqlite3.Connection, deadline: float) -> None:
        while True:
            try:
                conn.execute("COMMIT")
                return
            except sqlite3.Error as error:
                if not conn.in_transaction:  # rolled back by SQLite itself: nothing applied
                    raise failure(error, self.path) from error
                if self.calls.inline and is_busy(error):
                    time.sleep(0.0005)  # a commit is never re-run: it waits here, even inline (rare)
                self._retry_or_raise(error, deadline, rollback=conn, inline_ok=False)

    def _retry_or_raise(self, error: sqlite3.Error, deadline: float,
                        rollback: sqlite3.Connection | None = None, inline_ok: bool = True) -> None:
        if is_busy(error) and time.monotonic() < deadline:
            self.busy_retries += 1
            if inline_ok and self.calls.inline:
                raise Busy from error
            self._retries += 1
            # 0.2, 0.4, 0.8, 1.6 ms, then 2 ms: the exponent is capped (2 ** 1024 is no float: a lock held
            # for seconds made ~1,000 retries and raised OverflowError out of the write)
            time.sleep(min(0.002, 0.0001 * 2 ** min(self._retries, BACKOFF_DOUBLINGS)) * random.uniform(0.5, 1.5))
            return
        if rollback is not None:
            self._rollback(rollback)
        raise failure(error, self.path) from error

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:  # a fatal error (I/O, full) rolled back already: ROLLBACK would hide it
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                logger.debug("rollback failed", exc_info=True)

    def _conn(self) -> sqlite3.Connection:
        if self.conn is None:
            raise BackendUnavailable(f"{self.path} is not open")
        return self.conn
