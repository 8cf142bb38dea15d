"""Board events and a bounded fan-out that never blocks the board."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio

DEFAULT_EVENT_BUFFER = 1000


class EventKind(enum.Enum):
    """What happened."""

    POSTED = "posted"
    CLAIMED = "claimed"
    RELEASED = "released"
    """Back on the board: abandoned, or its owner went away."""
    READY = "ready"
    """A waiting job's last dependency was consumed: it is claimable now."""
    CONSUMED = "consumed"
    TRASHED = "trashed"
    MALFORMED = "malformed"
    """An entry on the board is not a valid posting; it is skipped."""
    DROPPED = "dropped"
    """This reader was too slow: ``count`` older events were discarded."""
    SUSPENDED = "suspended"
    """The backend connection was lost; the session may still be alive."""
    RECONNECTED = "reconnected"
    """The connection is back and the session (with its claims) survived."""
    SESSION_EXPIRED = "session_expired"
    """The session was lost: every claim this board held is gone."""


@dataclass(frozen=True, slots=True)
class Event:
    """One board event. ``job_id`` is ``None`` for board-level events."""

    kind: EventKind
    job_id: str | None = None
    detail: str = ""
    """Owner, reason or description, depending on ``kind``."""
    count: int = 0
    """For ``DROPPED``: how many events this reader lost."""


class EventStream:
    """An async iterator over the events one reader has not seen yet.

    It buffers at most ``maxlen`` events; when full, the oldest is discarded and
    the reader gets one ``DROPPED`` event with the count before the next one.
    Iteration ends when the board closes (after what was buffered) or at once
    when :meth:`aclose` is called. One task should read a stream; give each
    reader its own stream.
    """

    def __init__(self, hub: EventHub, maxlen: int) -> None:
        self._hub = hub
        self._buffer: deque[Event] = deque(maxlen=maxlen)
        self._dropped = 0
        self._wakeup = anyio.Event()
        self._closed = False

    def _push(self, event: Event) -> None:
        if len(self._buffer) == self._buffer.maxlen:
            self._dropped += 1
        self._buffer.append(event)
        self._wakeup.set()

    def _end(self) -> None:
        self._closed = True
        self._wakeup.set()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._dropped:
                count, self._dropped = self._dropped, 0
                return Event(EventKind.DROPPED, count=count, detail=f"{count} events lost")
            if self._buffer:
                return self._buffer.popleft()
            if self._closed:
                raise StopAsyncIteration
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    async def aclose(self) -> None:
        """Stop receiving events; what was buffered is discarded."""
        self._hub.unsubscribe(self)
        self._buffer.clear()
        self._dropped = 0
        self._end()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class EventHub:
    """Fans events out to every open :class:`EventStream`; publishing never waits."""

    def __init__(self) -> None:
        self._streams: set[EventStream] = set()

    def subscribe(self, maxlen: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """A new stream that receives every event published from now on."""
        stream = EventStream(self, maxlen)
        self._streams.add(stream)
        return stream

    def unsubscribe(self, stream: EventStream) -> None:
        self._streams.discard(stream)

    @property
    def has_subscribers(self) -> bool:
        """Whether any stream is open: publishers may skip building events when not."""
        return bool(self._streams)

    def publish(self, event: Event) -> None:
        for stream in self._streams:
            stream._push(event)

    def close(self) -> None:
        """End every stream (after it drains what it buffered)."""
        for stream in self._streams:
            stream._end()
        self._streams.clear()
