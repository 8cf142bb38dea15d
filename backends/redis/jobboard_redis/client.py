"""The one module that touches redis.asyncio (as ``zk.py`` is for aiozk).

Every board write is one ``EVALSHA`` of ``board.lua`` carrying a nonce: a call
whose reply is lost is sent again with the same nonce until it answers or the
retry window ends, and the script recognises a nonce it already applied. Native
exceptions are mapped here: transient ones (connection, timeout, loading,
read-only replica) become :class:`RetryExhausted` after the window, permanent
ones (authentication, ACL, wrong types) a :class:`~jobboard.errors.JobBoardError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import anyio
import redis.asyncio as redis_asyncio
from redis import exceptions as native
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_redis.options import RedisOptions

logger = logging.getLogger(__name__)

LUA = "\n".join(files("jobboard_redis").joinpath(name).read_text() for name in ("board.lua", "keep.lua",
                                                                                     "sessions.lua"))
MIN_VERSION = (7, 0)
TRANSIENT = (native.ConnectionError, native.TimeoutError, native.BusyLoadingError, native.ReadOnlyError,
             native.MasterDownError, native.TryAgainError, OSError)
PERMANENT = (native.AuthenticationError, native.AuthorizationError, native.NoPermissionError)

Arg = str | bytes | int | float


class RetryExhausted(BackendUnavailable):
    """Redis could not be reached within the retry window (the write may or may not have applied)."""


def permanent_error(error: BaseException) -> JobBoardError:
    """A one-line error for a failure that retrying cannot fix."""
    if isinstance(error, PERMANENT):
        return JobBoardError(f"Redis refused the board's command (check the user's ACL and password): {error}")
    return JobBoardError(f"Redis error: {error}")


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, PERMANENT):
        return False
    if isinstance(error, TRANSIENT):
        return True
    text = str(error)
    return isinstance(error, native.ResponseError) and text.startswith(("LOADING", "MASTERDOWN", "READONLY"))


class RedisClient:
    """A connection pool for board calls plus one connection for the blocking event reader."""

    def __init__(self, options: RedisOptions) -> None:
        self.options = options
        self.prefix = options.prefix
        self._redis = self._connect(options, timeout=max(options.session_timeout, 1.0))
        self._reader = self._connect(options, timeout=None, single=True)
        self._sha = hashlib.sha1(LUA.encode()).hexdigest()
        self._queue: list[tuple[list[Arg], asyncio.Future[Any]]] = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._wait_for = 0
        """Replicas each batch of writes waits for (``durability=strict`` with replicas)."""
        self._script = self._evalsha

    async def _evalsha(self, *, keys: list[str], args: list[Arg]) -> Any:
        """EVALSHA of ``board.lua``, loading it first if the server does not know it (NOSCRIPT).

        Calls made in the same loop iteration go out together in one pipeline (one round trip).
        """
        command: list[Arg] = ["EVALSHA", self._sha, len(keys), *keys, *args]
        while True:
            done = asyncio.get_running_loop().create_future()
            if not self._queue:
                asyncio.get_running_loop().call_soon(self._flush)
            self._queue.append((command, done))
            reply = await done
            if not isinstance(reply, native.NoScriptError):
                if isinstance(reply, Exception):
                    raise reply
                return reply
            await self._redis.script_load(LUA)

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _send(self, batch: list[tuple[list[Arg], asyncio.Future[Any]]]) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            for command, _ in batch:
                pipe.execute_command(*command)
            if self._wait_for:
                pipe.execute_command("WAIT", self._wait_for, int(self.options.retry_window * 1000))
            replies = await pipe.execute(raise_on_error=False)
            if self._wait_for and replies.pop() != self._wait_for:
                logger.warning("a write was not acknowledged by a replica within %ss", self.options.retry_window)
        except BaseException as error:  # the connection failed: every caller retries (nonces)
            for _, done in batch:
                if not done.done():
                    done.set_exception(error if isinstance(error, Exception) else native.ConnectionError("cancelled"))
            if not isinstance(error, Exception):
                raise
            return
        for (_, done), reply in zip(batch, replies, strict=True):
            if not done.done():
                done.set_result(reply)

    @staticmethod
    def _connect(options: RedisOptions, *, timeout: float | None, single: bool = False) -> Any:
        settings: dict[str, Any] = {
            "db": options.db, "username": options.username, "password": options.password, "ssl": options.tls,
            "socket_timeout": timeout, "socket_connect_timeout": min(options.retry_window, 5.0),
            "retry": Retry(NoBackoff(), 0), "max_connections": None if single else 128,
            "single_connection_client": single, "health_check_interval": 0}
        if options.sentinel:  # the primary is asked of the Sentinels at every (re)connection
            sentinels = Sentinel(  # type: ignore[no-untyped-call]
                list(options.sentinels), socket_timeout=min(options.retry_window, 5.0))
            del settings["single_connection_client"]  # a pool's option there, not a client's
            return sentinels.master_for(options.sentinel, **settings)
        return redis_asyncio.Redis(host=options.host, port=options.port, **settings)

    async def check_server(self) -> list[str]:
        """Refuse an unusable server; return warnings (persistence off).

        :raises JobBoardError: Redis older than 7.0 or evicting keys.
        """
        info = await self.command("INFO", "server")
        version_text = str(info.get("redis_version", "0.0"))
        version = tuple(int(part) for part in version_text.split(".")[:2])
        if version < MIN_VERSION:
            raise JobBoardError(f"Redis {version_text} is too old for redis:// boards: 7.0 or newer is needed")
        policy = str((await self.command("INFO", "memory")).get("maxmemory_policy", "unknown"))
        if policy != "noeviction":
            raise JobBoardError(f"Redis maxmemory-policy is {policy}: evicted job keys would be lost jobs; "
                                f"set maxmemory-policy noeviction")
        if self.options.durability == "strict":
            await self._check_strict()
        if str((await self.command("INFO", "persistence")).get("aof_enabled", 0)) == "0":
            return [(f"Redis {self.options.host}:{self.options.port} has appendonly off: acknowledged posts "
                     f"and settles since the last snapshot (if any) are lost if it stops")]
        return []

    async def _check_strict(self) -> None:
        """:raises JobBoardError: the server does not fsync every write before answering."""
        config = await self.command("CONFIG", "GET", "append*")
        found = dict(zip(config[::2], config[1::2], strict=True)) if isinstance(config, list) else dict(config)
        settings = {_text(key): _text(value) for key, value in found.items()}
        if settings.get("appendonly") != "yes" or settings.get("appendfsync") != "always":
            raise JobBoardError(f"durability=strict needs appendonly yes and appendfsync always; the server has "
                                f"appendonly {settings.get('appendonly')}, appendfsync {settings.get('appendfsync')}")
        replicas = int((await self.command("INFO", "replication")).get("connected_slaves", 0))
        self._wait_for = 1 if replicas else 0

    async def command(self, *args: Arg) -> Any:
        """One command, retried over the window on transient failures (reads, idempotent writes)."""
        return await self._retrying(lambda: self._redis.execute_command(*args))

    async def pipeline(self, commands: Sequence[Sequence[Arg]], *, errors_in_place: bool = False) -> list[Any]:
        """Several read commands in one round trip (with ``errors_in_place``, a failed command's
        reply is a :class:`~jobboard.errors.JobBoardError` instead of raising)."""

        async def send() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=not errors_in_place)
            return [permanent_error(reply) if isinstance(reply, native.ResponseError) else reply
                    for reply in replies]

        replies: list[Any] = await self._retrying(send)
        return replies

    async def call(self, op: str, nonce: str, *args: Arg) -> tuple[str, list[Any], list[Any]]:
        """Run one operation of ``board.lua``; returns (status, data, events)."""
        keys = [self.prefix]
        argv = [op, nonce, *args]
        status, data, events = await self._retrying(lambda: self._script(keys=keys, args=argv))
        return _text(status), list(data), list(events)

    async def _retrying(self, send: Any) -> Any:
        deadline = time.monotonic() + self.options.retry_window
        delay, attempts = 0.02, 0
        while True:
            attempts += 1
            try:
                return await send()
            except Exception as error:
                if not _is_transient(error):
                    if isinstance(error, native.RedisError):
                        raise permanent_error(error) from error
                    raise
                if attempts > 1 and time.monotonic() + delay > deadline:  # a stopped process retries once
                    raise RetryExhausted(f"Redis {self.options.host}:{self.options.port} unreachable: "
                                         f"{error or type(error).__name__}") from error
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def read_events(self, last_id: str, block_ms: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Events after ``last_id`` from the board's stream (blocking up to ``block_ms``).

        :raises BackendUnavailable: the connection failed (the caller resumes from ``last_id``).
        """
        try:
            reply = await self._reader.xread({self.prefix + "ev": last_id}, count=512, block=block_ms)
        except Exception as error:
            if _is_transient(error):
                raise BackendUnavailable(f"event stream: {error or type(error).__name__}") from error
            if isinstance(error, native.RedisError):
                raise permanent_error(error) from error
            raise
        if not reply:
            return []
        return [(_text(entry_id), fields) for entry_id, fields in reply[0][1]]

    async def last_event_id(self) -> str:
        """The id of the stream's newest entry (``0-0`` when empty)."""
        entries = await self.command("XREVRANGE", self.prefix + "ev", "+", "-", "COUNT", "1")
        return _text(entries[0][0]) if entries else "0-0"

    async def first_event_id(self) -> str | None:
        """The id of the stream's oldest entry (``None`` when empty)."""
        entries = await self.command("XRANGE", self.prefix + "ev", "-", "+", "COUNT", "1")
        return _text(entries[0][0]) if entries else None

    async def close(self) -> None:
        for client in (self._reader, self._redis):
            try:
                await client.aclose()
            except Exception:  # closing a broken connection: nothing left to do
                logger.debug("error closing a Redis connection", exc_info=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
