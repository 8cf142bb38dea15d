"""The pieces of the ZooKeeper protocol that aiozk 0.32 lacks or gets in the way of.

With :mod:`jobboard_zookeeper.zk`, :mod:`.zk_session` and :mod:`.fastwire`, the only modules that import aiozk.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import logging
import random
import re
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiozk import exc, protocol
from aiozk.connection import Connection
from aiozk.protocol.primitives import Int, UString

from jobboard.errors import BackendUnavailable
from jobboard_zookeeper.fastwire import fast_reader
from jobboard_zookeeper.ops import Stat

logger = logging.getLogger(__name__)


Parts = tuple[tuple[str, Any], ...]


def operation(name: str, opcode: int, request: Parts, response: Parts = ()) -> Any:
    """The request class of an operation aiozk lacks; its response class is made beside it and registered
    with aiozk by opcode (aiozk's response metaclass does that), as aiozk's own operations are."""
    type(f"{name}Response", (protocol.response.Response,), {"opcode": opcode, "parts": response, "__module__": __name__})
    return type(f"{name}Request", (protocol.request.Request,), {"opcode": opcode, "parts": request, "__module__": __name__})


AddWatchRequest = operation("AddWatch", 106, (("path", UString), ("mode", Int)))
"""ZooKeeper 3.6+ ``addWatch``."""
PERSISTENT_RECURSIVE = 1
RemoveWatchesRequest = operation("RemoveWatches", 18, (("path", UString), ("type", Int)))
"""ZooKeeper 3.5+ ``removeWatches``."""
ANY_WATCHER = 3
AllChildrenNumberRequest = operation("AllChildrenNumber", 104, (("path", UString),), (("number", Int),))
"""ZooKeeper 3.6+ ``getAllChildrenNumber``: how many nodes are below a path."""


def digest_acl(username: str, password: str) -> list[Any]:
    """An ACL giving every permission to the digest identity ``username:password`` only."""
    digest = base64.b64encode(hashlib.sha1(f"{username}:{password}".encode()).digest()).decode()
    return [protocol.acl.ACL.make(scheme="digest", id=f"{username}:{digest}", read=True, write=True,
                              create=True, delete=True, admin=True)]


def plain_reader(conn: Any) -> Callable[[int], Awaitable[bytes]]:
    """aiozk wraps every chunk it reads in ``asyncio.wait_for`` (a task each on Python 3.11):
    a quarter of the CPU of a busy board. A plain ``readexactly`` is enough here, because
    the watchdog notices a stalled connection (its pings' replies stall behind the frame)."""

    async def read(size: int = -1) -> bytes:
        try:
            return bytes(await conn.reader.readexactly(size))
        except asyncio.IncompleteReadError as error:
            raise exc.UnfinishedRead() from error  # aiozk's read loop aborts the connection

    return read


WRITE_EVERY = 4
"""Requests per ``send`` when more are made in one turn of the event loop. One ``send`` per turn
made the client and the server take turns; a ``send`` every 4 lets the server start on them while
the client makes the rest: a board's cycle at W=16 gained 5 % (7 interleaved pairs; W=64 0.5 %;
docs/backends/zookeeper.md). 2, 4 and 8 differed by less than the runs did; 4 is the redis://
wire's choice, where it measured best (1.7×)."""


def coalesce_writes(conn: Any) -> None:
    """Send the requests made in one turn of the event loop in a few ``send``s (one per
    :data:`WRITE_EVERY`): aiozk writes each request at once, and a loopback ``send`` costs more
    than encoding a request (the kernel delivers it to the server in the caller's time)."""
    writer, loop = conn.writer, asyncio.get_running_loop()
    write = writer.write
    pending: list[bytes] = []
    flush_due = False

    def send() -> None:
        data = b"".join(pending)
        pending.clear()
        if not writer.transport.is_closing():
            write(data)

    def flush() -> None:
        nonlocal flush_due
        flush_due = False
        if pending:
            send()

    def coalescing_write(data: bytes) -> None:
        nonlocal flush_due
        pending.append(data)
        if len(pending) >= WRITE_EVERY:
            send()
        elif not flush_due:
            flush_due = True
            loop.call_soon(flush)

    writer.write = coalescing_write


def stat_of(raw: Any) -> Stat:
    return Stat(version=int(raw.version), czxid=int(raw.created_zxid), mzxid=int(raw.last_modified_zxid),
                num_children=int(raw.num_children), ephemeral_owner=int(raw.ephemeral_owner),
                mtime=int(raw.modified) / 1000)


RECONNECT_DELAYS = (0.05, 1.0)
"""First and longest pause between rounds of connection attempts (aiozk: 2, 4, 8 ... 60 s)."""
REFUSED_FOR = 0.5
"""How long a start without ``connect_timeout`` waits while every server refuses every connection."""
REFUSED = "connection refused"


def prompt_find_server(session: Any, closing: Callable[[], bool]) -> Callable[[bool], Awaitable[None]]:
    """aiozk's ``Session.find_server``, with pauses of at most a second between rounds: its own
    exponential back-off to 60 s kept a board away for seconds to a minute after an outage. It ends
    (cancelled) once ``closing()``, even if the cancellation meant to end it was lost: Python 3.11's
    ``asyncio.wait_for`` drops a cancellation that lands as its inner call returns, and asyncio.run's
    exit cancels a task once, then waits for it forever."""

    async def find_server(allow_read_only: bool) -> None:
        delay = RECONNECT_DELAYS[0]
        while True:
            for host, port in random.sample(session.hosts, len(session.hosts)):
                if closing():
                    raise asyncio.CancelledError("the board is closing")
                conn = await session.make_connection(host, port)
                if conn is None:
                    continue
                if conn.start_read_only and not allow_read_only:
                    asyncio.get_running_loop().create_task(conn.close(session.timeout))
                    continue
                old, session.conn = session.conn, conn
                if old is not None:
                    asyncio.get_running_loop().create_task(old.close(session.timeout))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_DELAYS[1])

    return find_server


def connect_failure(error: BaseException) -> str:
    """Why a connection attempt failed, in words (refused, name not resolved, bad port ...)."""
    codes = re.findall(r"\[Errno (\d+)\]", str(error)) if type(error) is OSError else []  # a name's addresses
    if isinstance(error, ConnectionRefusedError) or {int(code) for code in codes} == {errno.ECONNREFUSED}:
        return REFUSED
    if isinstance(error, socket.gaierror):
        return f"host name not resolved ({error.strerror})"
    if isinstance(error, (OverflowError, ValueError)):
        return f"bad address ({error})"
    if isinstance(error, TimeoutError):
        return "no answer (timed out)"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[:1].lower() + error.strerror[1:]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class ConnectFailures:
    """The last failure to connect to each server, said at once (a warning while ``warn``), and whether
    every attempt on every server was refused (nothing listens there)."""

    def __init__(self, servers: list[tuple[str, int]]) -> None:
        self.last: dict[str, str] = {}
        self.warn = True
        self._servers = {f"{host}:{port}" for host, port in servers}
        self._answered: set[str] = set()
        """Servers that accepted a connection, or failed otherwise than by refusing it."""
        self._gave_up_after: float | None = None

    def record(self, where: str, error: BaseException, *, said: bool = False) -> None:
        """Keep why connecting to ``where`` failed (``said``: the caller warned already)."""
        cause = connect_failure(error)
        if cause != REFUSED:
            self._answered.add(where)
        if self.warn and not said and self.last.get(where) != cause:
            _warn(where, cause)
        self.last[where] = cause

    def reached(self, where: str) -> None:
        self.last.pop(where, None)
        self._answered.add(where)

    async def connected(self, start: Coroutine[Any, Any, None], limit: float, patience: float | None) -> None:
        """Await ``start`` (a session's first connection) up to ``limit`` s. With ``patience``, the
        warnings wait that long, and the start gives up then if every server refused every attempt.

        :raises TimeoutError: not connected in time (:meth:`unreachable` says why).
        """
        starting = asyncio.ensure_future(start)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        try:
            if patience is not None:
                await self._unless_refused(starting, min(patience, limit), deadline)
            await asyncio.wait_for(starting, max(deadline - loop.time(), 0.0))
        finally:
            starting.cancel()

    async def _unless_refused(self, starting: asyncio.Future[None], patience: float, deadline: float) -> None:
        """Quiet for ``patience`` s; then :raises TimeoutError: if every server refused every attempt
        (a server not tried yet is waited for), or else say why it keeps trying."""
        self.warn, wait, loop = False, patience, asyncio.get_running_loop()
        while not (await asyncio.wait([starting], timeout=wait))[0] and not self._answered:
            if set(self.last) == self._servers:
                self._gave_up_after = patience
                raise TimeoutError
            wait = min(0.05, deadline - loop.time())  # a server not tried yet
            if wait <= 0:
                break
        self.warn = True
        if not starting.done():
            for where, cause in self.last.items():
                _warn(where, cause)

    def unreachable(self, timeout: float, error: BaseException) -> BackendUnavailable:
        """The error for a start that found no server within ``timeout``: each server's last failure."""
        causes = "; ".join(f"{where}: {cause}" for where, cause in self.last.items()) or repr(error)
        if self._gave_up_after is not None:
            return BackendUnavailable(f"every ZooKeeper server refused every connection for "
                                      f"{self._gave_up_after:g}s ({causes}); is it running?")
        return BackendUnavailable(f"no ZooKeeper server reachable within {timeout:.1f}s: {causes}")


def _warn(where: str, cause: str) -> None:
    logger.warning("cannot connect to ZooKeeper at %s: %s; retrying", where, cause)


def recording_connect(session: Any) -> tuple[ConnectFailures, Callable[[str, int], Awaitable[Any]]]:
    """aiozk's ``Session.make_connection``, keeping why an attempt failed (aiozk only logs it)."""
    failures = ConnectFailures(session.hosts)

    async def make_connection(host: str, port: int) -> Any:
        conn = Connection(host, port, watch_handler=session.event_dispatch, read_timeout=session.read_timeout)
        try:
            await conn.connect()
        except Exception as error:  # noqa: BLE001 -- aiozk's catches everything too: the next server is tried
            failures.record(f"{host}:{port}", error)
            return None
        failures.reached(f"{host}:{port}")
        return conn

    return failures, make_connection


def hook_connections(session: Any, ping_timeout: float, closing: Callable[[], bool]) -> ConnectFailures:
    """Bound connecting (a server that accepts but never answers must not stall the reconnect loop),
    retry at least every second (until ``closing()``), give every new connection a plain reader and
    coalesced writes. Returns the record of why connecting failed."""
    failures, original = recording_connect(session)

    async def make_connection(host: str, port: int) -> Any:
        try:
            conn = await asyncio.wait_for(original(host, port), ping_timeout * 3)
        except TimeoutError as error:
            logger.warning("ZooKeeper server %s:%s accepted but did not answer; trying another", host, port)
            failures.record(f"{host}:{port}", error, said=True)
            return None
        if conn is not None:
            conn._read, conn.read_response = plain_reader(conn), fast_reader(conn)
            coalesce_writes(conn)
        return conn

    session.make_connection = make_connection
    session.find_server = prompt_find_server(session, lambda: closing() or bool(session.closing))
    return failures
