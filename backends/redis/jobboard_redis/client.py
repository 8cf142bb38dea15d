"""The board's side of Redis: the connections, the script, the retries (``zk.py``'s role for aiozk).

Every board write is one ``FCALL`` of the board's Redis function (``board.lua``) carrying a nonce: a call
whose reply is lost is sent again with the same nonce until it answers or the retry window ends, and the
script recognises a nonce it already applied. The wire is :mod:`jobboard_redis.client_wire` (pipelined RESP
over ``hiredis``' parser), the only module that imports a Redis library. Errors are mapped here: transient
ones (connection, timeout, loading, read-only replica) become :class:`RetryExhausted` after the window,
permanent ones (authentication, ACL, wrong types) a :class:`~jobboard.errors.JobBoardError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from importlib.resources import files
from typing import Any

import anyio

from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_redis.client_wire import (
    REFUSED_FOR,
    Arg,
    ConnectionLost,
    NotSent,
    Refusals,
    Refused,
    ServerError,
    Wire,
    connect,
)
from jobboard_redis.failures import (
    RECONNECT_CODES,
    RetryExhausted,
    is_transient,
    may_have_run,
    permanent_error,
)
from jobboard_redis.learned import Learned, judge, questions
from jobboard_redis.locate import Locator
from jobboard_redis.options import RedisOptions
from jobboard_redis.replication import Replication

logger = logging.getLogger(__name__)

_SOURCE = "\n".join(files("jobboard_redis").joinpath(name).read_text()
                    for name in ("board.lua", "post.lua", "settle.lua", "wake.lua", "flow.lua", "links.lua",
                                 "keep.lua", "sessions.lua"))
FUNCTION = "jobboard_" + hashlib.sha1(_SOURCE.encode()).hexdigest()[:16]
"""The library's (and its one function's) name: each version of the code has its own."""
LIBRARY = f"#!lua name={FUNCTION}\n" + _SOURCE.replace("JOBBOARD_FUNCTION", FUNCTION)
MIN_CONNECT_BUDGET = 0.25
_DEADLINE: ContextVar[float] = ContextVar("deadline", default=float("inf"))
"""When the retry window of the call being made ends (monotonic): a reconnection does not outlast it."""

__all__ = ["Arg", "ConnectionLost", "RedisClient", "RetryExhausted", "ServerError", "permanent_error"]


class RedisClient:
    """One pipelined connection for board calls, one for the event reader and one for the session's notices
    (each blocking connection is opened at its first use)."""

    def __init__(self, options: RedisOptions) -> None:
        self.options = options
        self.prefix = options.prefix
        self._tls = ssl.create_default_context() if options.tls else None
        self._timeout = options.reply_wait
        self._main: Wire | None = None
        self._lost_at: float | None = None
        """When the board's connection was found lost (``None``: connected, or never was)."""
        self._blocked: dict[str, Wire] = {}
        """The connections of blocking reads: ``reader`` (the event stream), ``notices`` (this session's list)."""
        self._locks = {"main": asyncio.Lock(), "reader": asyncio.Lock(), "notices": asyncio.Lock()}
        self._closed = False
        self.locator = Locator(options, self._tls)
        """Where the primary is: asked at each (re)connection (:mod:`.locate`)."""
        self.replication = Replication(self._server, strict=options.durability == "strict",
                                       reply_timeout=self._timeout, retry_window=options.retry_window,
                                       alone=self.locator.alone_check())
        """``durability=strict``: the replicas each write waits for, learned from the current primary."""
        self._warned: set[str] = set()
        self._nonce_prefix = f"{uuid.uuid4().hex}."
        self._nonce_suffix = f":{options.nonce_ms}"
        self._nonces = itertools.count()
        self._script = self._fcall

    def nonce(self) -> str:
        """A write's nonce: unique (a random prefix per client, then a counter), ending with how long
        the server remembers it (``:<ms>``)."""
        return f"{self._nonce_prefix}{next(self._nonces)}{self._nonce_suffix}"

    # -- connections -------------------------------------------------------

    async def _wire(self) -> Wire:
        """The board's connection, (re)connected if needed (one attempt shared by every caller)."""
        wire = self._main
        if wire is not None and wire.failed is None:
            return wire
        lock = self._locks["main"]
        try:  # waiting on another caller's attempt counts against this caller's retry window too
            async with asyncio.timeout(self._connect_budget()):
                await lock.acquire()
        except TimeoutError:
            raise NotSent(f"{self._server}: still reconnecting") from None
        try:
            return await self._reconnect_if_needed()
        finally:
            lock.release()

    async def _reconnect_if_needed(self) -> Wire:
        """:meth:`_wire`'s work, under its lock."""
        if self._main is not None and self._main.failed is None:
            return self._main  # another caller reconnected meanwhile
        if self._main is not None and self._lost_at is None:
            self._lost_at = time.monotonic()
            logger.warning("%s: connection lost (%s); reconnecting", self._server, self._main.failed)
        try:
            self._main = await self._connect(self._timeout, learn=True)
        except (ConnectionLost, ServerError) as error:  # the caller's command was not sent
            if isinstance(error, ServerError) and not is_transient(error):
                raise permanent_error(error) from error
            raise NotSent(str(error)) from error
        if self._lost_at is not None:
            logger.warning("%s: reconnected after %.1f s", self._server, time.monotonic() - self._lost_at)
            self._lost_at = None
        return self._main

    def _connect_budget(self) -> float:
        """Seconds a (re)connection may take: at most 5 and the reply timeout, and not past the retry window of the
        call being retried (but a quarter of a second at least: a process stopped past its window tries once)."""
        left = _DEADLINE.get() - time.monotonic()
        return min(self.options.retry_window, 5.0, self._timeout, max(MIN_CONNECT_BUDGET, left))

    @property
    def _server(self) -> str:
        return self.locator.name

    async def _connect(self, reply_timeout: float | None, *, learn: bool = False) -> Wire:
        """A connection to the primary; with ``learn``, its server is asked what the board must know of it
        (:mod:`jobboard_redis.learned`), in the same round trip.

        :raises ConnectionLost, ServerError: see :func:`~jobboard_redis.client_wire.connect`.
        :raises JobBoardError: (``learn``) the server is unusable for this board.
        """
        if self._closed:
            raise BackendUnavailable("the board's Redis connections are closed")
        options = self.options
        host, port = await self.locator.primary(min(options.retry_window, 5.0))
        hello: list[list[Arg]] = []
        if options.password is not None:
            hello.append(["AUTH", *([options.username] if options.username else []), options.password])
        if options.db:
            hello.append(["SELECT", options.db])
        asked = len(hello)
        hello.extend(questions(options.durability == "strict") if learn else [["ROLE"]] if options.sentinel else [])
        try:
            wire, replies = await connect(host, port, reply_timeout=reply_timeout, tls=self._tls, hello=hello,
                                          connect_timeout=self._connect_budget(), on_silent=self.locator.silent)
        except Refused as error:
            if not self.locator.named:
                raise
            raise ConnectionLost(str(error)) from error  # the primary they named is down: they name another
        role = (replies[asked + 3] if learn else replies[-1]) if options.sentinel else None
        if role is not None and role[0] != b"master":
            wire.close()
            raise ConnectionLost(f"Redis {host}:{port} named by the Sentinels is not the primary (yet)")
        if learn:
            wire.linger = options.linger  # the board's calls (a blocking read has nothing to wait for)
            try:
                self._learned(judge(replies[asked:], server=f"Redis {host}:{port}", durability=options.durability),
                              f"{host}:{port}")
            except (JobBoardError, ConnectionLost):
                wire.close()
                raise
        return wire

    def _learned(self, learned: Learned, address: str) -> None:
        """Take in what a new connection's server said (each warning once in the board's life)."""
        for warning in set(learned.warnings) - self._warned:
            logger.warning("%s", warning)
        self._warned.update(learned.warnings)
        if self.replication.strict:
            self.replication.learned(learned.replicas, address)

    # -- commands ----------------------------------------------------------

    async def _fcall(self, *, keys: list[str], args: list[Arg]) -> Any:
        """FCALL of the board's function, loading its library first if the server lacks it.

        Calls made in the same loop iteration go out together, pipelined (a write every few commands).
        """
        command: list[Arg] = ["FCALL", FUNCTION, len(keys), *keys, *args]
        for loaded in (False, True):
            wire = self._main
            if wire is None or wire.failed is not None:
                wire = await self._wire()
            reply = await wire.send(command)
            if self.replication.strict:
                try:
                    await self._replicated(wire)
                except NotSent as error:  # the command itself was sent: it may have run
                    raise ConnectionLost(str(error)) from error
            if not isinstance(reply, ServerError):
                return reply
            if loaded or "Function not found" not in str(reply):
                self._failed(reply)
                raise reply
            await self._one(("FUNCTION", "LOAD", "REPLACE", LIBRARY))
        raise AssertionError("unreachable")

    async def _replicated(self, wire: Wire) -> None:
        """``durability=strict``: a replica has the write, or the primary has none (:mod:`.replication`)."""
        await self.replication.after_write(wire)

    def _failed(self, error: ServerError) -> None:
        """Drop the connection to a server that is no longer the primary."""
        if error.code in RECONNECT_CODES and self._main is not None:
            self._main.close()

    async def _one(self, command: Sequence[Arg]) -> Any:
        reply = await (await self._wire()).send(command)
        if isinstance(reply, ServerError):
            self._failed(reply)
            raise reply
        return reply

    async def check_server(self) -> None:
        """Connect, and refuse an unusable server (asked again at every reconnection: :mod:`.learned`).

        :raises BackendUnavailable: no connection within the retry window, or, without ``connect_timeout``,
            every attempt refused for :data:`REFUSED_FOR` s (a server that answers late is waited for).
        :raises JobBoardError: Redis older than 7.0, evicting keys, or not fsyncing every write under
            ``durability=strict``.
        """
        refusals = Refusals(None if self.options.connect_timeout else REFUSED_FOR)

        async def connect() -> Wire:
            try:
                return await self._wire()
            except NotSent as error:
                if refusals.too_long(error):
                    raise BackendUnavailable(f"{self._server} refused every connection for {REFUSED_FOR:g}s "
                                             f"({error.__cause__}); is it running?") from error
                raise

        await self._retrying(connect)

    async def info(self, section: str) -> dict[str, str]:
        """``INFO section`` as a mapping of text."""
        lines = _text(await self.command("INFO", section)).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))

    async def command(self, *args: Arg) -> Any:
        """One command, retried over the window on transient failures (reads, idempotent writes)."""
        return await self._retrying(lambda: self._one(args))

    async def pipeline(self, commands: Sequence[Sequence[Arg]], *, errors_in_place: bool = False) -> list[Any]:
        """Several read commands pipelined (with ``errors_in_place``, a command refused for its key's type, a key
        another tool wrote, replies :class:`~jobboard.errors.JobBoardError` in its place; any other error raises)."""

        async def send() -> list[Any]:
            wire = await self._wire()
            replies = [await done for done in [wire.send(command) for command in commands]]
            for reply in replies:
                if isinstance(reply, ServerError) and not (errors_in_place and reply.code == "WRONGTYPE"):
                    self._failed(reply)
                    raise reply
            return [permanent_error(reply) if isinstance(reply, ServerError) else reply for reply in replies]

        replies: list[Any] = await self._retrying(send)
        return replies

    async def call(self, op: str, nonce: str, *args: Arg) -> tuple[str, list[Any], list[Any]]:
        """Run one operation of ``board.lua``; returns (status, data, events).

        A resend (the connection failed: the first call may have applied) marks its nonce with a
        leading ``!``, the only case in which the script looks the nonce up.
        """
        wire = self._main
        if (wire is not None and wire.failed is None and not self.replication.strict
                and getattr(self._script, "__func__", None) is RedisClient._fcall):
            try:  # the common case in one step: connected, the library loaded, no WAIT
                reply = await wire.send(("FCALL", FUNCTION, 1, self.prefix, op, nonce, *args))
            except ConnectionLost as error:
                return await self._resend(op, nonce, args, maybe_applied=not isinstance(error, NotSent))
            if not isinstance(reply, ServerError):
                status, data, events = reply
                return status.decode(), data, events
            if "Function not found" not in str(reply):  # refused: not run (transient) or for good
                self._failed(reply)
                if not is_transient(reply):
                    raise permanent_error(reply) from reply
                return await self._resend(op, nonce, args, maybe_applied=False)
        keys, first = [self.prefix], [op, nonce, *args]
        again = [op, f"!{nonce}", *args] if nonce else first
        return _status(await self._retrying(lambda: self._script(keys=keys, args=first),
                                            lambda: self._script(keys=keys, args=again)))

    async def _resend(self, op: str, nonce: str, args: tuple[Arg, ...], *,
                      maybe_applied: bool) -> tuple[str, list[Any], list[Any]]:
        """Resend a call whose first attempt failed transiently (marked: it may have applied)."""
        again = [op, f"!{nonce}" if nonce else nonce, *args]
        return _status(await self._retrying(lambda: self._script(keys=[self.prefix], args=again), failed=True,
                                            maybe_applied=maybe_applied))

    async def _retrying(self, send: Callable[[], Any], again: Callable[[], Any] | None = None, *,
                        failed: bool = False, maybe_applied: bool = False) -> Any:
        """``send()``, then ``again()`` (default: ``send()``) after transient failures, until the window
        ends (``failed``: the first attempt was made by the caller and failed transiently;
        ``maybe_applied``: that attempt was sent and its reply lost).

        :raises RetryExhausted: the window ended; ``maybe_applied`` if any attempt was sent unanswered.
        """
        if not failed:
            try:
                return await send()
            except (ConnectionLost, ServerError) as error:
                if not is_transient(error):
                    raise permanent_error(error) from error
                maybe_applied = may_have_run(error)
        deadline = time.monotonic() + self.options.retry_window
        delay = 0.02
        again = again or send
        while True:
            await anyio.sleep(delay)
            window = _DEADLINE.set(deadline)
            try:
                return await again()
            except (ConnectionLost, ServerError) as error:
                if not is_transient(error):
                    raise permanent_error(error) from error
                maybe_applied = maybe_applied or may_have_run(error)
                if time.monotonic() + delay > deadline:  # a stopped process retries once
                    unsent = "" if maybe_applied else " (nothing was sent)"
                    raise RetryExhausted(f"{self._server} unreachable{unsent}: "
                                         f"{error or type(error).__name__}", maybe_applied=maybe_applied) from error
            finally:
                _DEADLINE.reset(window)
            delay = min(delay * 2, 0.5)

    async def read_events(self, last_id: str | bytes, block_ms: int) -> list[tuple[bytes, list[bytes]]]:
        """Events after ``last_id`` from the board's stream (blocking up to ``block_ms``): (id, flat
        fields) pairs, as Redis sent them.

        :raises BackendUnavailable: the connection failed (the caller resumes from ``last_id``).
        """
        reply = await self._blocking("reader", ("XREAD", "COUNT", 512, "BLOCK", block_ms, "STREAMS",
                                                self.prefix + "ev", last_id), block_ms / 1000)
        return reply[0][1] if reply else []

    async def pop_notices(self, key: str, block_s: float) -> list[bytes]:
        """Up to 256 entries from the head of list ``key`` (``BLMPOP``), waiting up to ``block_s`` for one,
        on the board's notice connection (its third: a blocking call holds its connection).

        :raises BackendUnavailable: the connection failed (nothing was taken, or what was is lost with it).
        """
        reply = await self._blocking("notices", ("BLMPOP", f"{block_s:.3f}", 1, key, "LEFT", "COUNT", 256), block_s)
        return list(reply[1]) if reply else []

    async def _blocking(self, slot: str, command: tuple[Arg, ...], block_s: float) -> Any:
        """``command`` (blocking ``block_s``) on connection ``slot``, reconnected if needed, dropped if silent longer."""
        try:
            async with self._locks[slot]:
                wire = self._blocked.get(slot)
                if wire is None or wire.failed is not None:
                    wire = self._blocked[slot] = await self._connect(self._timeout + block_s)
            reply = await wire.send(command)
            if isinstance(reply, ServerError):
                raise reply
        except (ConnectionLost, ServerError) as error:
            if is_transient(error):
                if isinstance(error, ServerError) and (failed := self._blocked.get(slot)) is not None:
                    failed.close()
                raise BackendUnavailable(f"{slot}: {error or type(error).__name__}") from error
            raise permanent_error(error) from error
        return reply

    async def close(self) -> None:
        self._closed = True
        self.replication.close()
        self.locator.close()
        for wire in (*self._blocked.values(), self._main):
            if wire is not None:
                wire.close()


def _status(reply: Any) -> tuple[str, list[Any], list[Any]]:
    status, data, events = reply
    return status.decode() if isinstance(status, bytes) else str(status), data, events


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
