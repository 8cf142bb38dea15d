"""A small pipelined RESP connection over ``hiredis``' parser (the only module that imports it).

A command sent while the connection has nothing in flight, when its last read woke at most one caller,
is written at once (a lone caller's call costs no extra loop iteration); the others issued in one
event-loop iteration go out together, in writes of at most :data:`WRITE_EVERY` commands, so Redis starts on the first while the rest are still
being prepared. Replies are read into one buffer per connection (:data:`READ_BUFFER`) and matched to
their callers first in, first out. A connection whose replies stop coming
for ``timeout`` seconds while commands wait is aborted, and every waiting command fails
with :class:`ConnectionLost`, as does every command of a connection that drops.
With ``linger`` (the board's ``?linger=``) a command instead waits up to that long for others, so that a
process with few callers (a one-slot worker settling held jobs) sends several in one write, which the
server reads once (docs/backends/redis.md, "Linger").
Chosen over ``redis.asyncio`` and ``coredis`` by measurement (docs/backends/redis.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import re
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import hiredis

Arg = str | bytes | int | float
Silent = Callable[[str], None]
"""Told the ``host:port`` of a server that left a command (or a new connection) unanswered for its timeout."""
logger = logging.getLogger(__name__)

WRITE_EVERY = 4
"""Commands per write when more are queued in one loop iteration. One write per iteration made the
client and Redis take turns (each idle while the other worked); writing every 4 commands lets them
work at once: the full cycle at 16 in flight went from 9,100 to 15,600 cycles/s (1: 13,800; 2: 15,300;
8: 14,100; medians of 2 interleaved rounds, docs/backends/redis.md)."""
LINGER_BATCH = 64
"""Commands queued while lingering that are written at once (a write need not wait for more)."""
READ_BUFFER = 65536
"""Bytes of the buffer each connection reads into (reused). asyncio's plain protocols receive into a new
256 KiB ``bytes`` per read, which glibc maps and unmaps each time (``mmap``, ``mremap``, ``munmap`` and a
page fault per reply: benchmarks/lone_claimer.py)."""


class ConnectionLost(ConnectionError):
    """The connection failed or timed out (every command waiting on it failed; retry may help)."""


class NotSent(ConnectionLost):
    """The command was never written to a connection (none could be made): Redis did not run it."""


class Refused(ConnectionLost):
    """The server's host refused the connection (``ECONNREFUSED``): nothing listens at that address."""


REFUSED_FOR = 0.5
"""How long an open without ``connect_timeout`` retries while every connection is refused (nothing listens)."""


class Refusals:
    """Ends an open's retries once every attempt was refused for ``patience`` seconds (``None``: never);
    any other failure (no answer in time, ``LOADING`` ...) is waited on for the whole retry window."""

    def __init__(self, patience: float | None) -> None:
        self.patience = patience
        self._since = time.monotonic()

    def too_long(self, error: ConnectionLost) -> bool:
        """Whether the open gives up after ``error``: every attempt so far refused, for ``patience`` s."""
        if not isinstance(error.__cause__, Refused):
            self.patience = None
        return self.patience is not None and time.monotonic() - self._since >= self.patience


def refused(error: BaseException) -> bool:
    """Whether connecting failed because every address of the host refused it (asyncio joins the
    errors of a name's several addresses in one ``OSError``'s text)."""
    codes = re.findall(r"\[Errno (\d+)\]", str(error)) if type(error) is OSError else []
    return isinstance(error, ConnectionRefusedError) or {int(code) for code in codes} == {errno.ECONNREFUSED}


class ServerError(Exception):
    """An error reply of the server (its text starts with the error code, e.g. ``NOSCRIPT``)."""

    @property
    def code(self) -> str:
        return str(self).split(" ", 1)[0]


class Wire(asyncio.BufferedProtocol):
    """One connection: commands out, replies in, FIFO."""

    def __init__(self, timeout: float | None, on_silent: Silent | None = None) -> None:
        self.timeout = timeout
        self.on_silent = on_silent
        """Told when the server leaves commands unanswered for ``timeout`` (a frozen or lost server)."""
        self.transport: asyncio.Transport | None = None
        self.failed: ConnectionLost | None = None
        self.address = ""
        """The server's ``host:port``, as asked for."""
        self._parser = hiredis.Reader(replyError=ServerError)
        self._buffer = memoryview(bytearray(READ_BUFFER))
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._out: list[bytes] = []
        self._flush_due = False
        self._woken = 0
        """Callers the last read woke: more than one may each send a command in this loop iteration."""
        self._progress = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.linger = 0.0
        """Seconds a command waits for others to share its write (``?linger=``; 0: the rules above)."""
        self._lingering: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._progress = time.monotonic()
        self._parser.feed(self._buffer, 0, nbytes)  # type: ignore[arg-type]  # (any buffer: the stub says bytes)
        waiting, woken = self._waiting, 0
        try:
            while (reply := self._parser.gets()) is not False:
                if not waiting:  # a reply nobody asked for: the stream is out of step
                    self._fail(ConnectionLost("Redis sent an unexpected reply"))
                    return
                done = waiting.popleft()
                if not done.done():
                    done.set_result(reply)
                    woken += 1
            self._woken = woken
        except hiredis.ProtocolError as error:  # not RESP: not a Redis server (or a broken one)
            self._fail(ConnectionLost(f"not a Redis reply: {error}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionLost(f"connection lost: {exc}" if exc else "connection closed by Redis"))

    def eof_received(self) -> bool | None:
        return None

    # -- commands ----------------------------------------------------------

    def send(self, command: Sequence[Arg], *, now: bool = False) -> asyncio.Future[Any]:
        """Queue one command: with ``linger`` (and not ``now``), written with what else is queued ``linger`` s
        after the first of them, or once :data:`LINGER_BATCH` are; else at once if none is in flight and the
        last read woke at most one caller, else with the next :data:`WRITE_EVERY` or at the end of this loop
        iteration. Its future gets the reply (a :class:`ServerError` for an error reply) or fails with
        :class:`ConnectionLost`."""
        done = self._loop.create_future()
        if self.failed is not None:
            done.set_exception(NotSent(str(self.failed)))
            return done
        packed = hiredis.pack_command(tuple(command))  # type: ignore[arg-type]
        idle = not self._waiting
        if idle and self.timeout is not None:  # the wait for a reply starts now, not at the last reply
            self._progress = time.monotonic()
            if self._timer is None:
                self._timer = self._loop.call_later(self.timeout, self._check)
        self._waiting.append(done)
        out = self._out
        out.append(packed)
        if self.linger and not now:
            self._linger(len(out))
        elif (idle and self._woken <= 1) or len(out) >= WRITE_EVERY:
            self._write()
        elif not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush)
        return done

    def _linger(self, queued: int) -> None:
        """With ``linger``: a write once :data:`LINGER_BATCH` commands are queued, else ``linger`` seconds after
        the first queued one (what the callers send meanwhile goes with it: one write, one read on the server)."""
        if queued >= LINGER_BATCH:
            self._write()
        elif self._lingering is None:
            self._lingering = self._loop.call_later(self.linger, self._write_lingered)

    def _stop_lingering(self) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
            self._lingering = None

    def _write_lingered(self) -> None:
        """The linger's timer: write what is queued (a failed write has failed the waiting commands already:
        nothing to raise into the event loop)."""
        self._lingering = None
        with contextlib.suppress(Exception):
            self._write()

    def _flush(self) -> None:
        self._flush_due, self._woken = False, 0
        self._write()

    def _write(self) -> None:
        """Write what is queued; a closing connection writes nothing (``connection_lost`` fails the
        waiting commands), a failed write fails them at once (the replies would be out of step)."""
        out, self._out = self._out, []
        self._stop_lingering()
        transport = self.transport
        if transport is None or self.failed is not None or not out or transport.is_closing():
            return
        try:
            transport.write(b"".join(out))
        except Exception as error:
            self._fail(ConnectionLost(f"cannot write to Redis: {error}"))
            raise

    def _check(self) -> None:
        """Abort the connection if commands have waited ``timeout`` without any reply."""
        self._timer = None
        if not self._waiting or self.failed is not None or self.timeout is None:
            return
        late = self._progress + self.timeout - time.monotonic()
        if late <= 0:
            self._fail(ConnectionLost(f"no reply from Redis {self.address} within {self.timeout}s"))
            if self.on_silent is not None:
                self.on_silent(self.address)
        else:
            self._timer = self._loop.call_later(late, self._check)

    def _fail(self, error: ConnectionLost) -> None:
        if self.failed is None:
            self.failed = error
        self._stop_lingering()
        if self.transport is not None:
            self.transport.abort()
        while self._waiting:
            done = self._waiting.popleft()
            if not done.done():
                done.set_exception(self.failed)
                done.exception()  # retrieved: a caller that has gone away does not log it

    def close(self) -> None:
        self._fail(ConnectionLost("connection closed"))


async def connect(host: str, port: int, *, reply_timeout: float | None, connect_timeout: float,
                  tls: ssl.SSLContext | None, hello: Sequence[Sequence[Arg]] = (),
                  on_silent: Silent | None = None) -> tuple[Wire, list[Any]]:
    """A new connection and the replies to the ``hello`` commands (AUTH, SELECT, ROLE ...); ``on_silent``
    is told if the server does not answer within ``connect_timeout`` (and, later, within ``reply_timeout``).

    :raises ConnectionLost: the server cannot be reached (or did not answer in time); :class:`Refused`
        if its host refused the connection.
    :raises ServerError: a ``hello`` command was refused (its reply's text).

    The connection is closed on any failure, a cancellation included (a probe of a frozen master cancelled
    by the board's close leaves no socket open).
    """
    loop = asyncio.get_running_loop()
    wire: Wire | None = None
    try:
        async with asyncio.timeout(connect_timeout):
            _, wire = await loop.create_connection(lambda: Wire(reply_timeout, on_silent), host, port, ssl=tls,
                                                   server_hostname=host if tls else None)
            wire.address = f"{host}:{port}"
            replies = list(await asyncio.gather(*[wire.send(command) for command in hello]))
    except BaseException as error:  # closed on any failure, a cancellation included
        if wire is not None:
            wire.close()
        if isinstance(error, TimeoutError):
            if on_silent is not None:
                on_silent(f"{host}:{port}")
            raise ConnectionLost(f"Redis {host}:{port} did not answer within {connect_timeout:.3g}s") from None
        if isinstance(error, (OSError, ssl.SSLError)):
            failure = Refused if refused(error) else ConnectionLost
            raise failure(f"cannot connect to Redis {host}:{port}: {error}") from error
        raise
    for reply in replies:
        if isinstance(reply, ServerError):
            wire.close()
            raise reply
    return wire, replies


async def ask_sentinels(sentinels: Sequence[tuple[str, int]], service: str, connect_timeout: float) -> tuple[str, int]:
    """The address of ``service``'s primary, asked of the Sentinels in turn.

    :raises ConnectionLost: no Sentinel named one; :class:`Refused` if every Sentinel refused the connection.
    """
    refusing = []
    for host, port in sentinels:
        try:
            wire, (address,) = await connect(host, port, reply_timeout=5.0, connect_timeout=connect_timeout, tls=None,
                                             hello=[["SENTINEL", "get-master-addr-by-name", service]])
        except (ConnectionLost, ServerError) as error:
            logger.debug("Sentinel %s:%s: %s", host, port, error)
            refusing += [f"{host}:{port}"] if isinstance(error, Refused) else []
            continue
        wire.close()
        if address:
            return address[0].decode(), int(address[1])
    if len(refusing) == len(sentinels):
        raise Refused(f"every Sentinel refused the connection: {', '.join(refusing)}")
    raise ConnectionLost(f"no Sentinel named a primary for {service!r}")
