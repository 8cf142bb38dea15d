"""One board's connection, run in its own thread; every write one ``BEGIN IMMEDIATE`` transaction.

``SQLITE_BUSY`` (the write lock held past the busy timeout, or a checkpoint in the way) is retried, the
whole transaction again, until ``retry_for`` seconds have passed: never fatal, and never reported as a
failure of a write that applied (a ``COMMIT`` that failed busy is committed again, not re-run).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_sqlite.schema import connect

logger = logging.getLogger("jobboard_sqlite")
T = TypeVar("T")

RETRY_FOR = 60.0
"""Seconds a busy transaction is retried before the call raises ``BackendUnavailable``."""


def describe(error: sqlite3.Error, path: Path) -> str:
    """One line saying what is wrong with the file."""
    text = str(error)
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a jobboard SQLite database ({text})"
    if "readonly" in text or "read-only" in text or "attempt to write" in text:
        return f"{path} is read-only ({text}): a sqlite:// board needs to write its file and its directory"
    if "disk is full" in text or "SQLITE_FULL" in text:
        return f"the disk holding {path} is full ({text})"
    if "unable to open" in text:
        return f"cannot open {path} ({text}): does its directory exist and is it writable?"
    return f"{path}: {text}"


def is_busy(error: sqlite3.Error) -> bool:
    text = str(error)
    return "locked" in text or "busy" in text


class Database:
    """A connection used by one thread only (every call goes through :meth:`run` or :meth:`submit`)."""

    def __init__(self, path: Path, busy_timeout: float, synchronous: str) -> None:
        self.path, self.busy_timeout, self.synchronous = path, busy_timeout, synchronous
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jobboard-sqlite")
        self.conn: sqlite3.Connection | None = None
        self.busy_retries = 0

    async def open(self) -> None:
        """:raises BackendUnavailable: the file cannot be opened as a board (one line saying why)."""
        await self.run(self._connect)

    def _connect(self) -> None:
        try:
            self.conn = connect(str(self.path), self.busy_timeout, self.synchronous)
        except sqlite3.Error as error:
            raise BackendUnavailable(describe(error, self.path)) from error

    async def close(self) -> None:
        if self.conn is not None:
            await self.run(self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def submit(self, work: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``work`` on the connection's thread (thread-safe, does not wait)."""
        return self._executor.submit(work)

    async def run(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the connection's thread and wait. A cancelled caller does not stop it."""
        return await asyncio.wrap_future(self._executor.submit(work))

    def write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction (on the connection's thread), retried while busy.

        ``body`` must be safe to run again from the start (it is, since a rolled-back attempt changed nothing).
        :raises BackendUnavailable: still busy after ``RETRY_FOR`` seconds, or an I/O error (disk full...).
        """
        conn = self._conn()
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                self._retry_or_raise(error, deadline)
                continue
            try:
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
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                conn.execute("BEGIN")
                try:
                    return body(conn)
                finally:
                    self._rollback(conn)
            except sqlite3.Error as error:
                self._retry_or_raise(error, deadline)

    def _commit(self, conn: sqlite3.Connection, deadline: float) -> None:
        while True:
            try:
                conn.execute("COMMIT")
                return
            except sqlite3.Error as error:
                if not conn.in_transaction:  # rolled back by SQLite itself: nothing applied
                    raise BackendUnavailable(describe(error, self.path)) from error
                self._retry_or_raise(error, deadline, rollback=conn)

    def _retry_or_raise(self, error: sqlite3.Error, deadline: float,
                        rollback: sqlite3.Connection | None = None) -> None:
        if is_busy(error) and time.monotonic() < deadline:
            self.busy_retries += 1
            time.sleep(random.uniform(0.0005, 0.005))
            return
        if rollback is not None:
            self._rollback(rollback)
        raise BackendUnavailable(describe(error, self.path)) from error

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

