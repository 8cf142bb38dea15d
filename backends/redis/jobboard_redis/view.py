"""The board's event stream, read only while someone listens: ``events()`` subscribers, ``wait_for_completion``.

A board does not read the stream to learn about claimable work or about its claims (that is
:mod:`jobboard_redis.notices`): a process that only claims decodes no event of other boards' jobs.
Events of this board's own writes are published as soon as their script answers (the script
returns the stream ids it added); the reader, while it runs, skips them when they come round, and
publishes every other board's events. Per-job waiters (``watch_claim``, ``wait_for_completion``)
sleep on signals that events and notices set.

The reader starts at a listener's first need, from the stream position of "now" on the server's
clock (estimated from the session's open, less :data:`START_MARGIN_MS`: an event from just before the
subscription may be shown, none after it is missed), or after this board's newest own event if that is
later, and stops at the first read after the last listener left.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

import anyio

from jobboard.board.events import Event, EventHub, EventKind
from jobboard.errors import BackendUnavailable
from jobboard_redis.client import RedisClient

logger = logging.getLogger(__name__)

KINDS = {"posted": EventKind.POSTED, "claimed": EventKind.CLAIMED, "released": EventKind.RELEASED,
         "ready": EventKind.READY, "consumed": EventKind.CONSUMED, "trashed": EventKind.TRASHED}
BLOCK_MS = 1000
MAX_RUN = 200
"""The most jobs one stream entry stands for (the scripts' ``post_simple`` takes at most 200 a call)."""
REMEMBERED = 20000
START_MARGIN_MS = 250
"""How far before "now" (on the server's clock, as estimated) a starting reader reads from."""


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class BoardView:
    """Publishes the board's events and wakes whoever waits for them; see the module docstring."""

    def __init__(self, client: RedisClient, hub: EventHub,
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self.client = client
        self.hub = hub
        self.publish = hub.publish
        self.spawn = spawn
        self.last_id: str | bytes = "0-0"
        self.server_offset_ms = 0.0
        """The server's clock minus this process's (ms), measured at the session's open."""
        self.listeners = 0
        self.decoded = 0
        """Stream entries read so far."""
        self.reading = False
        self._jobs: dict[str, anyio.Event] = {}
        self._own: OrderedDict[bytes, None] = OrderedDict()
        """Stream ids of this board's own events, already published (skipped when streamed)."""
        self._streamed: OrderedDict[bytes, None] = OrderedDict()
        self._seen: bytes | None = None
        """The newest stream id known to exist (read, or one of this board's own): tells a rolled-back stream."""
        self.connected = True
        self.stopped = False

    # -- signals ------------------------------------------------------------

    def notify(self, job: str | None = None) -> None:
        """Wake waiters of ``job`` (every job's waiter when ``None``)."""
        if job is None:
            for event in self._jobs.values():
                event.set()
            self._jobs.clear()
        elif self._jobs and (waiting := self._jobs.pop(job, None)) is not None:
            waiting.set()

    def job_signal(self, job: str) -> anyio.Event:
        """An event set at the next change of ``job`` (take it before checking the job)."""
        if (event := self._jobs.get(job)) is None:
            event = self._jobs[job] = anyio.Event()
        return event

    # -- events ------------------------------------------------------------

    def local(self, events: Sequence[object]) -> None:
        """Publish the events a script of this board reported (flat: id, kind, job, detail, ...)."""
        streamed, own, reading = self._streamed, self._own, self.reading
        for index in range(0, len(events) - 3, 4):
            entry_id = events[index]
            if not isinstance(entry_id, bytes):
                entry_id = str(entry_id).encode()
            self._seen = entry_id
            if reading:  # the reader will meet it: skip it then (or it met it already: published then)
                if entry_id in streamed:
                    del streamed[entry_id]
                    continue
                own[entry_id] = None
                if len(own) > REMEMBERED:
                    own.popitem(last=False)
            self._emit(events[index + 1], _text(events[index + 2]), events[index + 3])

    def _emit(self, kind: object, job: str, detail: object) -> None:
        """Publish an event of the stream (only when someone listens) and wake the job's waiters."""
        if "+" in job and (run := _run_of(job)) is not None:
            self._emit_run(kind, run, detail)
            return
        if self.hub.has_subscribers and (mapped := KINDS.get(_text(kind))) is not None:
            self.publish(Event(mapped, job or None, _text(detail)))
        if job and self._jobs:
            self.notify(job)

    def _emit_run(self, kind: object, jobs: range, detail: object) -> None:
        """One event of a run of jobs (``'<first id>+<count>'``, from ``post_many``): one event per job."""
        if self.hub.has_subscribers and (mapped := KINDS.get(_text(kind))) is not None:
            text = _text(detail)
            for job in jobs:
                self.publish(Event(mapped, str(job), text))
        if self._jobs:
            for job in jobs:
                if (waiting := self._jobs.pop(str(job), None)) is not None:
                    waiting.set()

    # -- the reader ---------------------------------------------------------

    def listen(self) -> None:
        """Someone listens (a subscriber, a completion waiter): read the stream from now on, if not already."""
        if self.reading or self.stopped:
            return
        self.reading = True
        start = f"{max(0, int(time.time() * 1000 + self.server_offset_ms) - START_MARGIN_MS)}-0"
        if self._seen is not None and _parts(_text(self._seen)) > _parts(start):
            start = _text(self._seen)  # this board's newest event: it published those up to it already
        self.last_id = start
        self.spawn(self.run())

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        """A caller that needs the stream while it waits (``wait_for_completion``, a watch of another's claim)."""
        self.listeners += 1
        self.listen()
        try:
            yield
        finally:
            self.listeners -= 1

    def _listened(self) -> bool:
        return self.hub.has_subscribers or self.listeners > 0

    async def run(self) -> None:
        """Read the stream until stopped or no one listens; reconnects resume from the last id."""
        try:
            while not self.stopped and self._listened():
                await self._read_once()
        finally:
            self.reading = False
            self._own.clear()
            self._streamed.clear()

    async def _read_once(self) -> None:
        try:
            entries = await self.client.read_events(self.last_id, BLOCK_MS)
        except BackendUnavailable as error:
            if self.connected:
                self.connected = False
                self.publish(Event(EventKind.SUSPENDED, detail=f"Redis connection lost: {error}"))
            await anyio.sleep(0.1)
            return
        if not self.connected:
            self.connected = True
            self.publish(Event(EventKind.RECONNECTED, detail="Redis connection back"))
            await self._report_trimmed()
            self.notify()
        self.decoded += len(entries)
        for entry_id, fields in entries:
            self.last_id = self._seen = entry_id
            self._streamed_entry(entry_id, fields)

    async def _report_trimmed(self) -> None:
        """After a reconnect: tell readers if the stream lost events they did not read (trimmed past the
        newest id known, or rolled back by a failover or a restart that lost writes).

        A stream whose newest entry is older than the newest one known was rolled back: reading on from
        the old id would skip the new server's next entries, and ids seen on the old server may come
        again, so the reader starts from the new server's newest entry and forgets the ids it saw.
        """
        try:
            first, newest = await _first_id(self.client), await _newest_id(self.client)
        except BackendUnavailable:
            return
        if self._seen is None:
            return
        if _parts(newest) < _parts(_text(self._seen)):
            self.last_id, self._seen = newest, None
            self._own.clear()
            self._streamed.clear()
            self.publish(Event(EventKind.DROPPED, detail="board events were rolled back (a failover or a restart "
                                                         "lost writes); re-read the board"))
        elif first is not None and _older(self._seen, first):
            self.publish(Event(EventKind.DROPPED, detail="board events were trimmed while disconnected; "
                                                         "re-read the board"))

    def _streamed_entry(self, entry_id: bytes, flat: list[bytes]) -> None:
        if entry_id in self._own:
            del self._own[entry_id]
            return
        self._streamed[entry_id] = None
        if len(self._streamed) > REMEMBERED:
            self._streamed.popitem(last=False)
        fields = dict(zip(flat[::2], flat[1::2], strict=False))
        self._emit(fields.get(b"k", b""), _text(fields.get(b"j", b"")), fields.get(b"d", b""))


def _run_of(job: str) -> range | None:
    """The ids of a run ``'<first id>+<count>'``, or ``None`` when ``job`` is not one (then it is one job's id)."""
    first, _, count = job.partition("+")
    if not (first.isdigit() and count.isdigit() and first.isascii() and count.isascii()) or len(count) > 3 \
            or len(first) > 40:
        return None
    if not 2 <= int(count) <= MAX_RUN:
        return None  # not a script's: read as one job id, like any other foreign entry
    return range(int(first), int(first) + int(count))


def _older(entry_id: str | bytes, than: str) -> bool:
    """Whether stream id ``entry_id`` comes before ``than`` (``0-0`` counts as the start)."""
    entry_id = _text(entry_id)
    if entry_id == "0-0":
        return False
    return _parts(entry_id) < _parts(than)


def _parts(entry_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in entry_id.split("-"))


async def _newest_id(client: RedisClient) -> str:
    """The id of the stream's newest entry (``0-0`` when empty)."""
    entries = await client.command("XREVRANGE", client.prefix + "ev", "+", "-", "COUNT", "1")
    return _text(entries[0][0]) if entries else "0-0"


async def _first_id(client: RedisClient) -> str | None:
    """The id of the stream's oldest entry (``None`` when empty)."""
    entries = await client.command("XRANGE", client.prefix + "ev", "-", "+", "COUNT", "1")
    return _text(entries[0][0]) if entries else None
