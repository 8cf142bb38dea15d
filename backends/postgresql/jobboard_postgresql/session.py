"""A board's session: a ``session`` row plus a session advisory lock held by one dedicated connection.

The lock is taken in the transaction that inserts the row, so no other session ever sees the row
unlocked. While the connection lives, the lock says "alive"; when the process dies its kernel closes
the socket, the server ends the backend and the lock is free at once (the reaper then releases the
claims). A silent owner (stopped, partitioned) is ended by the server itself: the connection runs with
``idle_session_timeout`` = the board's session timeout and sends a heartbeat every third of it.

The same connection LISTENs on the session's own channel (``<schema>_<id>``): ``w`` (work for you: a
wake-one NOTIFY) and ``c<job id>`` (one of your claims was changed by another board). It marks the
session idle or busy for the wake-one rule. When the connection is lost or a heartbeat is not answered
in time, ``on_lost`` is called once: the board fences itself (its claims are gone) and starts a new
session; it never takes the old lock again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from jobboard.board.services import wait_ended
from jobboard_postgresql.options import Options

logger = logging.getLogger("jobboard_postgresql")


class Session:
    """One session; see the module docstring. ``id`` is set by :meth:`start`."""

    def __init__(self, options: Options, on_message: Callable[[str], None], on_lost: Callable[[Session], None]) -> None:
        self.options = options
        self.id = 0
        self.pid = 0
        self._on_message = on_message
        self._on_lost = on_lost
        self._connection: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._heartbeat: asyncio.Task[None] | None = None
        self.lost = False
        self._beaten = time.monotonic()  # the last heartbeat (or the start): a loss long after it says so
        self.idle = False
        self._mark = 0
        """The number of the newest idle mark asked for; a mark older than it is never written (see :meth:`set_idle`)."""
        self._clearing: set[asyncio.Task[None]] = set()

    @property
    def channel(self) -> str:
        return f"{self.options.schema}_{self.id}"

    async def start(self) -> None:
        """Connect, insert the row and take the lock in one transaction, LISTEN, start the heartbeat."""
        timeout_ms = str(int(self.options.session_timeout * 1000))
        connection = await asyncpg.connect(self.options.dsn, timeout=self.options.connect_timeout,
                                           server_settings={"idle_session_timeout": timeout_ms,
                                                                            "lock_timeout": "200"})
        try:
            schema = self.options.schema
            async with connection.transaction():
                self.id = await connection.fetchval(f'INSERT INTO "{schema}".session (board) VALUES ($1) RETURNING id',
                                                    self.options.board)
                await connection.execute("SELECT pg_advisory_lock($1, $2::int)", self.options.ns, self.id)
            self.pid = connection.get_server_pid()
            await connection.add_listener(self.channel, self._notified)
        except BaseException:
            connection.terminate()
            raise
        connection.add_termination_listener(self._terminated)
        self._connection = connection
        self._beaten = time.monotonic()
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat(), name=f"pg-session-{self.id}")

    def _notified(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        if payload == "w":
            self.idle = False  # the poster cleared our row's idle mark when it chose us
        self._on_message(payload)

    def _terminated(self, connection: Any) -> None:
        self.lose("its connection closed")

    def lose(self, why: str) -> None:
        if self.lost:
            return
        self.lost = True
        why = late(time.monotonic() - self._beaten, self.options.session_timeout) + why
        logger.warning("postgresql: board %s lost session %s (%s)", self.options.board, self.id, why)
        if self._connection is not None:
            self._connection.terminate()
        self._on_lost(self)

    async def _beat(self) -> None:
        interval = self.options.session_timeout / 3
        while not self.lost:
            await asyncio.sleep(interval)
            try:
                await self.execute("SELECT 1", limit=interval * 1.5)
            except Exception as error:  # noqa: BLE001 - any failure: the session cannot be vouched for
                self.lose(f"heartbeat failed: {type(error).__name__}: {error}")
                return
            self._beaten = time.monotonic()

    async def execute(self, query: str, *args: Any, limit: float | None = None,
                      superseded: Callable[[], bool] = lambda: False) -> None:
        """Run ``query`` on the session's connection (one at a time, in the order asked); not at all if
        ``superseded()`` says so once its turn comes."""
        connection = self._connection
        if connection is None or self.lost:
            raise ConnectionError("session lost")
        async with self._lock:
            if not superseded():
                await connection.execute(query, *args, timeout=limit or self.options.session_timeout)

    async def set_idle(self, idle: bool) -> None:
        """Mark the session idle (a poster's ``wake`` may choose it) or busy, and return once written.
        Best effort: a failure is a lost session. Marks are written in the order asked, a superseded one
        not at all, so the row ends with the newest mark (never an older one landing late)."""
        if idle == self.idle or self.lost:
            return
        self.idle = idle
        self._mark += 1
        await self._write_mark(idle, self._mark)

    def clear_idle(self) -> None:
        """Mark the session busy without waiting for the write (off a woken ``wait()``'s path). Until it
        lands a poster may still choose this session: its ``w`` then finds no waiter and is passed on."""
        if not self.idle or self.lost:
            return
        self.idle = False
        self._mark += 1
        task = asyncio.get_running_loop().create_task(self._write_mark(False, self._mark),
                                                      name=f"pg-session-{self.id}-busy")
        self._clearing.add(task)
        task.add_done_callback(self._clearing.discard)

    async def marks_written(self) -> None:
        """Return once the marks asked for so far have been written (or skipped, superseded)."""
        while self._clearing:
            await asyncio.gather(*self._clearing, return_exceptions=True)

    async def _write_mark(self, idle: bool, mark: int) -> None:
        schema = self.options.schema
        try:
            await self.execute(f'UPDATE "{schema}".session SET idle_since = {"clock_timestamp()" if idle else "NULL"} '
                               "WHERE id = $1", self.id, superseded=lambda: mark != self._mark)
        except asyncpg.LockNotAvailableError:
            if mark == self._mark:
                self.idle = False  # a poster holds our row: it is choosing us, its NOTIFY comes at its commit
        except Exception as error:  # noqa: BLE001 - any other failure: the session cannot be vouched for
            self.lose(f"marking it {'idle' if idle else 'busy'} failed: {type(error).__name__}: {error}")

    async def close(self) -> None:
        """Stop the heartbeat and close the connection (the server drops the lock). Cancelled meanwhile, the
        connection is cut at once and the caller's cancellation raised."""
        self.lost = True
        tasks = [*self._clearing, *([self._heartbeat] if self._heartbeat is not None else [])]
        self._heartbeat = None
        for task in tasks:
            task.cancel()
        try:
            await wait_ended(tasks)
        except BaseException:
            self._cut()
            raise
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.remove_termination_listener(self._terminated)
            try:
                await asyncio.wait_for(connection.close(), 2.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - a connection that will not close cleanly is cut
                connection.terminate()

    def _cut(self) -> None:
        """Close the connection without waiting (the server ends the session and drops its lock)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.remove_termination_listener(self._terminated)
            connection.terminate()


def late(silent: float, session_timeout: float) -> str:
    """Why a heartbeat came too late, when it did (the loop was blocked, or the process stopped): the words
    an operator can act on, before the driver's own error."""
    if silent < session_timeout:
        return ""
    return (f"no heartbeat for {silent:.1f}s, past session_timeout={session_timeout:g}s: was the event loop blocked "
            f"or the process stopped? ")
