"""One session per board, renewed by one heartbeat; fencing of an owner that cannot renew.

The server keeps ``sessions`` (a sorted set: session -> deadline on the
server's clock). The heartbeat renews this board's deadline every
``session_timeout / 3`` and reaps (idempotently, in the same script) any
session past its deadline: its claims go back on the board, its entities
vanish. It also wakes up at the earliest deadline of other sessions, so that
a dead owner's claims are released at most a few milliseconds after it.

An owner that has had no heartbeat acknowledged for ``session_timeout`` since
it was sent fences itself: its claims are declared lost (``watch_claim``
returns, the worker cancels the handlers) and a new session is started; the
server refuses the old claims' settles anyway.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import anyio

from jobboard.errors import BackendUnavailable
from jobboard_redis.client import RedisClient

logger = logging.getLogger(__name__)

Listener = Callable[[str, list[object]], None]
"""Called with ("expired" | "renewed" | "events", events) on session changes."""


class Session:
    """This board's session on the server; see the module docstring."""

    def __init__(self, client: RedisClient, timeout: float, on_change: Listener) -> None:
        self.client = client
        self.timeout = timeout
        self.timeout_ms = max(1, int(timeout * 1000))
        self.on_change = on_change
        self.id = ""
        self.server_offset_ms = 0.0
        self.last_ack = time.monotonic()
        """When the last acknowledged heartbeat was *sent* (monotonic)."""
        self.fenced = False
        self.stopped = False
        self._beating = anyio.Lock()
        """Held around each heartbeat: one renewal (or replacement) at a time."""

    async def open(self) -> None:
        self.id = uuid.uuid4().hex
        sent, wall = time.monotonic(), time.time()
        _, data, _ = await self.client.call("open", "", self.id, self.timeout_ms)
        self.server_offset_ms = int(data[0]) - (wall + time.time()) * 500  # the server's clock minus ours
        self.last_ack, self.fenced = sent, False

    async def run(self) -> None:
        """The heartbeat loop (runs until cancelled or stopped)."""
        while not self.stopped:
            pause = self.timeout / 3
            try:
                async with self._beating:
                    pause = min(pause, await self.beat())
            except BackendUnavailable as error:
                logger.warning("heartbeat failed: %s", error)
                pause = min(pause, 0.2)
            except Exception:  # never let the heartbeat die: that would expire the session silently
                logger.exception("heartbeat failed")
                pause = min(pause, 0.2)
            self._fence_if_late()
            await anyio.sleep(max(pause, 0.005))

    async def watchdog(self) -> None:
        """Fence this board as soon as its last acknowledged heartbeat is ``timeout`` old."""
        while not self.stopped:
            self._fence_if_late()
            await anyio.sleep(max(0.01, min(self.timeout / 10, self.last_ack + self.timeout - time.monotonic())))

    async def beat(self) -> float:
        """Renew this session and reap dead ones; return seconds until the next reap is due."""
        if self.fenced:
            await self._replace("could not renew the session in time")
        sent = time.monotonic()
        status, data, events = await self.client.call("beat", "", self.id, self.timeout_ms)
        if events:
            self.on_change("events", events)
        if status == "expired":
            await self._replace("session expired on the server")
        else:
            self.last_ack = sent
        next_ms = int(data[0]) if data else -1
        return self.timeout / 3 if next_ms < 0 else next_ms / 1000 + 0.002

    async def recover(self, refused: str) -> None:
        """The server refused session *refused* as dead: renew or replace it now.

        Concurrent callers share one heartbeat: a caller whose session was already replaced
        returns at once. The replaced session's claims are declared lost as by the heartbeat.

        :raises BackendUnavailable: the server could not be reached.
        """
        async with self._beating:
            if self.id == refused and not self.stopped:
                await self.beat()

    def _fence_if_late(self) -> None:
        if not self.fenced and time.monotonic() - self.last_ack > self.timeout:
            self.fenced = True
            self.on_change("expired", [])

    async def _replace(self, why: str) -> None:
        """Give up this session (its claims go back on the board) and start a new one.

        Not cancellable half-way (a caller's timeout would leave no session until the next
        heartbeat); a board stopped meanwhile starts none.

        :raises BackendUnavailable: the server could not be reached, or the board was stopped.
        """
        logger.warning("%s: claims of session %s are lost, starting a new one", why, self.id)
        if not self.fenced:
            self.fenced = True
            self.on_change("expired", [])
        with anyio.CancelScope(shield=True):  # bounded: every call gives up after the retry window
            events = await self.close()
            if events:
                self.on_change("events", events)
            if self.stopped:
                raise BackendUnavailable("the board closed while its Redis session was being replaced")
            await self.open()
        self.on_change("renewed", [])

    async def close(self) -> list[object]:
        """Release this session's claims and entities at once; returns the events."""
        _, _, events = await self.client.call("close", "", self.id)
        return events
