"""The board's event stream: one blocking ``XREAD`` loop, resumed from the last id after a reconnect.

Events of this board's own writes are published as soon as their script
answers (the script returns the stream ids it added); the reader skips them
when they come round, and publishes every other board's events. Waiters
(``wait``, ``watch_claim``, ``wait_for_completion``) sleep on per-job or
board-wide signals that the events set.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence

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


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class BoardView:
    """Publishes the board's events and wakes whoever waits for them."""

    def __init__(self, client: RedisClient, hub: EventHub) -> None:
        self.client = client
        self.hub = hub
        self.publish = hub.publish
        self.last_id: str | bytes = "0-0"
        self._board_changed = anyio.Event()
        self._board_waited = False
        """Whether someone took the board signal since it was last set (else setting it is skipped)."""
        self._jobs: dict[str, anyio.Event] = {}
        self._own: set[bytes] = set()
        """Stream ids of this board's own events, already published (skipped when streamed)."""
        self._streamed: OrderedDict[bytes, None] = OrderedDict()
        self.connected = True
        self.stopped = False

    async def start(self) -> None:
        self.last_id = await self.client.last_event_id()

    # -- signals ------------------------------------------------------------

    def notify(self, job: str | None = None) -> None:
        """Wake waiters of ``job`` (every waiter when ``None``) and of the board."""
        if job is None:
            for event in self._jobs.values():
                event.set()
            self._jobs.clear()
        elif self._jobs and (waiting := self._jobs.pop(job, None)) is not None:
            waiting.set()
        self._notify_board()

    def _notify_board(self) -> None:
        if self._board_waited:
            self._board_waited = False
            self._board_changed.set()
            self._board_changed = anyio.Event()

    def job_signal(self, job: str) -> anyio.Event:
        """An event set at the next change of ``job`` (take it before checking the job)."""
        if (event := self._jobs.get(job)) is None:
            event = self._jobs[job] = anyio.Event()
        return event

    def board_signal(self) -> anyio.Event:
        """An event set at the next change of the board."""
        self._board_waited = True
        return self._board_changed

    # -- events ------------------------------------------------------------

    def local(self, events: Sequence[object]) -> None:
        """Publish the events a script of this board reported (flat: id, kind, job, detail, ...)."""
        streamed, own = self._streamed, self._own
        for index in range(0, len(events) - 3, 4):
            entry_id = events[index]
            if not isinstance(entry_id, bytes):
                entry_id = str(entry_id).encode()
            if entry_id in streamed:
                del streamed[entry_id]
            else:
                own.add(entry_id)
                self._emit(events[index + 1], _text(events[index + 2]), events[index + 3])

    def _emit(self, kind: object, job: str, detail: object) -> None:
        """Publish an event of the stream (only when someone listens) and wake the job's and the board's waiters."""
        if "+" in job and (run := _run_of(job)) is not None:
            self._emit_run(kind, run, detail)
            return
        if self.hub.has_subscribers and (mapped := KINDS.get(_text(kind))) is not None:
            self.publish(Event(mapped, job or None, _text(detail)))
        self.notify(job or None)

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
        self._notify_board()

    async def run(self) -> None:
        """Read the stream until cancelled or stopped; reconnects resume from the last id."""
        while not self.stopped:
            try:
                entries = await self.client.read_events(self.last_id, BLOCK_MS)
            except BackendUnavailable as error:
                if self.connected:
                    self.connected = False
                    self.publish(Event(EventKind.SUSPENDED, detail=f"Redis connection lost: {error}"))
                await anyio.sleep(0.1)
                continue
            if not self.connected:
                self.connected = True
                self.publish(Event(EventKind.RECONNECTED, detail="Redis connection back"))
                await self._report_trimmed()
                self.notify()
            for entry_id, fields in entries:
                self.last_id = entry_id
                self._streamed_entry(entry_id, fields)

    async def _report_trimmed(self) -> None:
        """After a reconnect: tell readers if the stream lost events they did not read (trimmed past the
        last id read, or rolled back by a failover or a restart that lost writes).

        A stream whose newest entry is older than the last one read was rolled back: reading on from
        the old id would skip the new server's next entries, and ids seen on the old server may come
        again, so the reader starts from the new server's newest entry and forgets the ids it saw.
        """
        try:
            first, newest = await self.client.first_event_id(), await self.client.last_event_id()
        except BackendUnavailable:
            return
        if _parts(newest) < _parts(_text(self.last_id)):
            self.last_id = newest
            self._own.clear()
            self._streamed.clear()
            self.publish(Event(EventKind.DROPPED, detail="board events were rolled back (a failover or a restart "
                                                         "lost writes); re-read the board"))
        elif first is not None and _older(self.last_id, first):
            self.publish(Event(EventKind.DROPPED, detail="board events were trimmed while disconnected; "
                                                         "re-read the board"))

    def _streamed_entry(self, entry_id: bytes, flat: list[bytes]) -> None:
        if entry_id in self._own:
            self._own.discard(entry_id)
            return
        self._streamed[entry_id] = None
        if len(self._streamed) > REMEMBERED:
            self._streamed.popitem(last=False)
        fields = dict(zip(flat[::2], flat[1::2], strict=False))
        self._emit(fields.get(b"k", b""), _text(fields.get(b"j", b"")), fields.get(b"d", b""))


def _run_of(job: str) -> range | None:
    """The ids of a run ``'<first id>+<count>'``, or ``None`` when ``job`` is not one (then it is one job's id)."""
    first, _, count = job.partition("+")
    if not (first.isdigit() and count.isdigit() and first.isascii() and count.isascii()) or len(count) > 3:
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
