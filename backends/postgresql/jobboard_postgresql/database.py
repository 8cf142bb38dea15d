"""The board's work pool and how a call survives transient failures.

Every board call runs as one function call on a pooled connection (one transaction). A transient
failure (connection lost or refused, the server shutting down or starting, a serialization failure or
deadlock, too many connections) is retried with back-off for the board's retry window, telling the
call it is a retry so that it looks for its own first attempt's effect (a post's token, a claim's
nonce, a settle's evidence) instead of doing the work twice; then ``BackendUnavailable``.

That look is decisive only once the first attempt is over: after a failure the server did not report
(the connection lost, a timeout) the statement may still be running, or its request still on the way.
So every call's transaction first takes a lock named by the call (an advisory lock on a claim's nonce,
a post's token, a batch's first one: ``jb.fence``; a settle's job row: ``jb.settling``), and looks for
its evidence only under it: a retry waits (a second at a time, again until the window ends) for its
first attempt's transaction to end, then finds what it committed; a first attempt arriving after its
retry finds the retry's mark (``retried``) and does nothing. No server process is signalled, nothing
is read from ``pg_stat_activity``: it works under any role and through a session-mode pooler. A first
attempt whose client is gone holds its lock until its server notices (``client_connection_check_interval``
= 1 s, keepalives: :func:`server_settings`) or its statement ends. Without the fence a retried claim
skipped the job its first attempt still held and took another, a post was written twice, a settle said
``ClaimLost`` of its own write (tests/backends/postgresql/test_retry_fence.py). The connection of an
attempt that failed unsettled is closed. Every statement has a client-side deadline (``call_timeout``)
and the sockets keepalives, so a partition or a frozen server fails the attempt instead of hanging it.
A
permanent error (permission, a missing table, bad input) is never retried and never disguised: it is
raised as ``BoardConflict`` naming the SQLSTATE and the server's message, with the driver's
exception as ``__cause__``. No asyncpg exception escapes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from jobboard.errors import BackendUnavailable, BoardConflict, InvalidURL, JobBoardError
from jobboard_postgresql.options import Options

logger = logging.getLogger("jobboard_postgresql")


class OneLineRetries(logging.Filter):
    """asyncpg's pool logs each failed attempt to restore its floor with a whole traceback (one a second
    while the server is down): keep the warning, on one line, naming the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Failed to restore the pool connection floor"):
            error = record.exc_info[1]
            record.msg, record.args = "%s (%s: %s)", (record.getMessage(), type(error).__name__, error)
            record.exc_info = record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(OneLineRetries())

T = TypeVar("T")

TRANSIENT_STATES = {"40001", "40P01", "53300", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001",
                    "08004", "55P03", "57014", "25P03", "JB001"}
"""Serialization failure, deadlock, too many connections, admin/crash shutdown, cannot connect now,
connection exceptions, lock timeout, statement cancelled (a shutdown), idle-in-transaction timeout, and
our own "session is gone" (the board makes a new session, then the call is retried)."""

SETUP_STATES = {"28000", "28P01", "3D000", "42501"}
"""Authentication failed, no such database, insufficient privilege: the URL is wrong."""


def transient(error: BaseException) -> bool:
    """Whether retrying ``error`` may succeed."""
    if isinstance(error, asyncpg.PostgresError):
        return str(getattr(error, "sqlstate", "")) in TRANSIENT_STATES
    return isinstance(error, (OSError, asyncio.TimeoutError, asyncpg.InterfaceError, ConnectionError,
                              asyncpg.exceptions.InternalClientError))


def unsettled(error: BaseException) -> bool:
    """Whether an attempt that failed with ``error`` may have been applied, or may still be: anything but
    an error the server reported for the statement (its transaction ended before the reply), except the
    connection and shutdown ones (class 08, 57P01-57P03: the process may be going, its outcome unsaid)."""
    if isinstance(error, asyncpg.PostgresError):
        state = str(getattr(error, "sqlstate", "") or "")
        return state.startswith("08") or state in ("57P01", "57P02", "57P03")
    return True


def keep_alive(connection: asyncpg.Connection, user_timeout: float) -> None:
    """TCP keepalives on a connection's socket (idle 1 s, then a probe a second, 3 unanswered: gone) and a
    TCP user timeout (data unacknowledged that long: gone): a partitioned server is noticed by the kernel,
    even while a statement waits for its reply. A Unix socket, or an option the platform lacks, is skipped."""
    transport = getattr(connection, "_transport", None)  # asyncpg has no public accessor for its socket
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 1), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 3),
                          ("TCP_USER_TIMEOUT", max(1000, int(user_timeout * 1000)))):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def server_settings(options: Options) -> dict[str, str]:
    """The settings of the board's pooled connections: a transaction left idle ends with the session timeout;
    the server looks every second whether the client of a running statement is still there (PostgreSQL 14+),
    and probes an idle client's socket as the client probes the server's (:func:`keep_alive`)."""
    return {"idle_in_transaction_session_timeout": str(int(options.session_timeout * 1000)),
            "client_connection_check_interval": "1000", "tcp_keepalives_idle": "1", "tcp_keepalives_interval": "1",
            "tcp_keepalives_count": "3"}


def gone_session(error: BaseException) -> int | None:
    """The session id of a ``JB001`` error (``jobboard session 3 is gone``), or ``None``."""
    found = re.search(r"session (\d+) is gone", str(error))
    return int(found.group(1)) if found else None


def permanent(error: BaseException, what: str) -> JobBoardError:
    """The jobboard error for a permanent failure of ``what``."""
    state = str(getattr(error, "sqlstate", "") or "")
    if state in SETUP_STATES:
        return InvalidURL(f"postgresql: {what}: {error} (SQLSTATE {state})")
    return BoardConflict(f"postgresql: {what} failed: {error} (SQLSTATE {state or 'none'})")


async def _no_reset(connection: asyncpg.Connection) -> None:
    """A pooled connection needs no reset between calls (asyncpg's default costs a round trip per call):
    the board's calls change no session state (no SET, LISTEN or session lock; their transactions end)."""


class Database:
    """The pool of one board; :meth:`run` is how the rest of the backend talks to the server."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.pool: asyncpg.Pool | None = None
        self.on_session_gone: Callable[[int | None], Awaitable[None]] | None = None
        """Called with the session's id when the server says a session of this board is gone (the board renews
        it if it is still its current one)."""

    async def open(self) -> None:
        """The pool; every statement on it has a client-side deadline (``command_timeout``: the options'
        ``call_timeout``), its sockets keepalives (:func:`keep_alive`)."""
        limit = self.options.call_timeout

        async def init(connection: asyncpg.Connection) -> None:
            keep_alive(connection, limit)

        self.pool = await self._retry_connect(lambda: asyncpg.create_pool(
            self.options.dsn, min_size=1, max_size=self.options.pool_size, timeout=self.options.connect_timeout,
            command_timeout=limit, server_settings=server_settings(self.options),
            max_inactive_connection_lifetime=60.0, reset=_no_reset, init=init))

    async def _retry_connect(self, connect: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + self.options.connect_timeout
        delay = 0.05
        while True:
            try:
                return await connect()
            except Exception as error:
                if not transient(error) or time.monotonic() + delay > deadline:
                    if transient(error):
                        raise BackendUnavailable(f"postgresql: cannot connect: {error}") from error
                    raise permanent(error, "connect") from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - a pool that will not close cleanly is cut
                pool.terminate()

    async def run(self, what: str, call: Callable[[asyncpg.Connection, bool], Awaitable[T]]) -> T:
        """``call(connection, retry)`` on a pooled connection, retried while failures are transient (the call's
        own functions fence a retry against its first attempt: see the module docstring).

        :raises BackendUnavailable: still failing after the retry window.
        :raises BoardConflict: a permanent failure (see the module docstring).
        """
        deadline = time.monotonic() + self.options.window
        delay, retry = 0.02, False
        while True:
            pool = self.pool
            if pool is None:
                raise BackendUnavailable(f"postgresql: {what}: the board's pool is closed")
            try:
                async with pool.acquire(timeout=max(deadline - time.monotonic(), self.options.session_timeout)) \
                        as connection:
                    return await attempt(connection, call, retry)
            except JobBoardError:
                raise
            except Exception as error:
                if not transient(error):
                    raise permanent(error, what) from error
                if str(getattr(error, "sqlstate", "")) == "JB001" and self.on_session_gone is not None:
                    await self.on_session_gone(gone_session(error))
                if time.monotonic() + delay > deadline:
                    why = str(error) or f"no answer within {self.options.call_timeout:g}s"
                    raise BackendUnavailable(f"postgresql: {what}: {type(error).__name__}: {why}") from error
                logger.debug("postgresql: %s failed (%s), retrying", what, error)
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay, retry = min(delay * 2, 0.5), True


async def attempt(connection: Any, call: Callable[[asyncpg.Connection, bool], Awaitable[T]], retry: bool) -> T:
    """One attempt; a connection whose attempt failed unsettled is closed here (never handed out again: its
    state is unknown)."""
    try:
        return await call(connection, retry)
    except Exception as error:
        if transient(error) and unsettled(error) and not connection.is_closed():
            connection.terminate()
        raise
