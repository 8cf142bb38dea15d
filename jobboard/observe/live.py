"""A live picture of one board, kept current from its events: for ``top``, metrics and dashboards.

:class:`LiveBoard` lists the board once, then follows ONE ``board.events()`` subscription. What an
event does not say is read lazily and in batches: a posted job's fields (one ``get`` each, skipped if
the job is gone first) and the owner of a claim when the backend's event does not name it. It
re-lists after ``DROPPED``, ``RECONNECTED`` and ``SESSION_EXPIRED`` (events it may have missed),
re-reads the live entities every ``entity_refresh`` seconds and counts the trash again every
``trash_refresh`` seconds (entries can leave the trash without an event). Any number of readers
share it: :meth:`LiveBoard.updates` fans out the events it applied.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import anyio
import anyio.abc

from jobboard.board.contract import JobBoard
from jobboard.board.events import DEFAULT_EVENT_BUFFER, Event, EventHub, EventKind, EventStream
from jobboard.errors import BackendUnavailable, BoardClosed, JobBoardError, JobNotFound
from jobboard.job import Entity, Job, JobState, ListedJob
from jobboard.observe.stats import BoardStats, WorkerView, read_stats, summarize

__all__ = ["BoardStats", "LiveBoard", "WorkerView", "read_stats"]

logger = logging.getLogger(__name__)

BUCKET_SECONDS, BUCKETS = 10.0, 60
"""Throughput is counted per 10-s bucket over the last 10 minutes."""
FETCH_BATCH = 256
RELIST_EVENTS = {EventKind.DROPPED, EventKind.RECONNECTED, EventKind.SESSION_EXPIRED}


@dataclass(slots=True)
class _Entry:
    """What the view knows of one job on the board (``job`` is ``None`` until it is read)."""

    job: Job | None
    state: JobState | None
    owner: str | None = None
    claimed_at: float | None = None
    owner_known: bool = True


def _board_order(item: ListedJob) -> tuple[int, int]:
    """``item.job.sort_key()`` (higher priority first, then posting order), 3x faster on 50 000 jobs."""
    return -item.job.priority, item.job.sequence


class LiveBoard:
    """A live view of ``board``; use it as an async context manager (the first listing is done when
    ``async with`` enters). Reading it (:meth:`jobs`, :meth:`stats`, ...) does no I/O."""

    def __init__(self, board: JobBoard, *, entity_refresh: float = 2.0, trash_refresh: float = 30.0,
                 fetch_interval: float = 0.05, clock: Callable[[], float] = time.time) -> None:
        self.board = board
        self._entity_refresh, self._trash_refresh, self._fetch_interval = entity_refresh, trash_refresh, fetch_interval
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._to_read: set[str] = set()
        """Jobs whose fields or owner an event did not give: read by :meth:`_fetch`, then dropped."""
        self._entities: list[Entity] = []
        self._trash_size = 0
        self._buckets: dict[int, list[int]] = {}
        self._version = 0
        self._changed = anyio.Event()
        self._hub = EventHub()
        self._healthy = True
        self._relist_wanted = False
        self._sorted: tuple[int, list[ListedJob]] = (-1, [])
        self._stream: EventStream | None = None
        self._tasks: anyio.abc.TaskGroup | None = None

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._stream = self.board.events(maxlen=max(DEFAULT_EVENT_BUFFER, 10_000))  # before listing: miss nothing
        await self._relist()
        await self._refresh_entities()
        await self._count_trash()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._follow)
        self._tasks.start_soon(self._every, self._fetch_interval, self._fetch)
        self._tasks.start_soon(self._every, self._entity_refresh, self._refresh_entities)
        self._tasks.start_soon(self._every, self._trash_refresh, self._count_trash)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._tasks is not None:
            self._tasks.cancel_scope.cancel()
            await self._tasks.__aexit__(None, None, None)
        if self._stream is not None:
            await self._stream.aclose()
        self._hub.close()

    # -- reading (no I/O) ----------------------------------------------------

    @property
    def version(self) -> int:
        """Increases with every change the view applies."""
        return self._version

    @property
    def healthy(self) -> bool:
        """``False`` while the board's backend is unreachable (the view may be stale)."""
        return self._healthy

    def jobs(self) -> list[ListedJob]:
        """The jobs on the board whose fields are known, in board order (priority, then age)."""
        if self._sorted[0] != self._version:
            listed = [ListedJob(e.job, e.state or JobState.UNCLAIMED, e.owner)
                      for e in self._entries.values() if e.job is not None]
            self._sorted = (self._version, sorted(listed, key=_board_order))
        return list(self._sorted[1])

    def job(self, job_id: str) -> ListedJob | None:
        """One job on the board, or ``None`` (not on it, or its fields not read yet)."""
        entry = self._entries.get(job_id)
        if entry is None or entry.job is None:
            return None
        return ListedJob(entry.job, entry.state or JobState.UNCLAIMED, entry.owner)

    def stats(self) -> BoardStats:
        """The board's figures from the view."""
        claimed_at = {job: e.claimed_at for job, e in self._entries.items() if e.claimed_at is not None}
        return summarize(self.jobs(), self._trash_size, self._entities, now=self._clock(), claimed_at=claimed_at)

    def throughput(self) -> list[tuple[float, int, int, int]]:
        """``(bucket start, posted, consumed, trashed)`` per 10-s bucket, oldest first, last 10 minutes."""
        newest = int(self._clock() // BUCKET_SECONDS)
        rows = []
        for bucket in range(newest - BUCKETS + 1, newest + 1):
            posted, consumed, trashed = self._buckets.get(bucket, (0, 0, 0))
            rows.append((bucket * BUCKET_SECONDS, posted, consumed, trashed))
        return rows

    async def changed(self, version: int) -> int:
        """Wait until the view's version is past ``version``; return the new version."""
        while self._version <= version:
            await self._changed.wait()
        return self._version

    def updates(self, maxlen: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """A stream of the events the view applies (one board subscription however many readers)."""
        return self._hub.subscribe(maxlen)

    # -- following -------------------------------------------------------------

    async def _follow(self) -> None:
        assert self._stream is not None
        async for event in self._stream:
            self._apply(event)
            if self._relist_wanted:
                await self._retrying(self._relist)
            self._hub.publish(event)
            self._bump()

    def _apply(self, event: Event) -> None:
        kind, job_id, entries = event.kind, event.job_id, self._entries
        if kind in RELIST_EVENTS:
            self._healthy, self._relist_wanted = True, True
        elif kind is EventKind.SUSPENDED:
            self._healthy = False
        elif job_id is None:
            return
        elif kind is EventKind.POSTED:
            self._entry(job_id)
            self._count(0)
        elif kind is EventKind.CLAIMED:
            entry = self._entry(job_id)
            entry.state, entry.claimed_at = JobState.CLAIMED, self._clock()
            entry.owner, entry.owner_known = event.detail or None, bool(event.detail)
            if not entry.owner_known:
                self._to_read.add(job_id)
            if entry.job is not None:
                entry.job = dataclasses.replace(entry.job, attempts=entry.job.attempts + 1)
        elif kind in (EventKind.RELEASED, EventKind.READY):
            entry = self._entry(job_id)
            entry.state, entry.owner, entry.claimed_at, entry.owner_known = JobState.UNCLAIMED, None, None, True
        elif kind in (EventKind.CONSUMED, EventKind.TRASHED):
            entries.pop(job_id, None)
            self._count(1 if kind is EventKind.CONSUMED else 2)
            self._trash_size += kind is EventKind.TRASHED

    def _entry(self, job_id: str) -> _Entry:
        """The job's entry; a new one (its fields to be read by :meth:`_fetch`) for a job not seen yet."""
        entry = self._entries.get(job_id)
        if entry is None:
            entry = self._entries[job_id] = _Entry(None, None)
            self._to_read.add(job_id)
        return entry

    def _count(self, column: int) -> None:
        bucket = int(self._clock() // BUCKET_SECONDS)
        self._buckets.setdefault(bucket, [0, 0, 0])[column] += 1
        for old in [b for b in self._buckets if b <= bucket - BUCKETS]:
            del self._buckets[old]

    def _bump(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = anyio.Event()

    # -- reading the board -------------------------------------------------------

    async def _relist(self) -> None:
        self._relist_wanted = False
        fresh: dict[str, _Entry] = {}
        async for item in self.board.listing():
            old = self._entries.get(item.job.id)
            since = old.claimed_at if old is not None and item.state is JobState.CLAIMED else None
            fresh[item.job.id] = _Entry(item.job, item.state, item.owner, since)
        self._entries = fresh
        self._to_read.clear()  # the listing read every job's fields and owner
        self._healthy = True

    async def _fetch(self) -> None:
        """Read the fields of newly posted jobs and the owners events did not name."""
        if not self._to_read:
            return
        for job_id in list(itertools.islice(self._to_read, FETCH_BATCH)):
            entry = self._entries.get(job_id)
            if entry is not None and entry.job is None:
                await self._fetch_job(job_id)
                entry = self._entries.get(job_id)
            if entry is not None and not entry.owner_known:
                owner = await self.board.owner(job_id)
                if not entry.owner_known:
                    entry.owner, entry.owner_known = owner, True
            self._to_read.discard(job_id)  # only once read: a failed read is tried again
        self._bump()

    async def _fetch_job(self, job_id: str) -> None:
        try:
            job = await self.board.get(job_id)
            state = await self.board.state(job) if job.depends_on else JobState.UNCLAIMED
        except JobNotFound:
            self._entries.pop(job_id, None)
            return
        entry = self._entries.get(job_id)
        if entry is None:  # settled while it was read
            return
        entry.job = job
        if entry.state is None:
            entry.state = state if state in (JobState.UNCLAIMED, JobState.WAITING) else JobState.UNCLAIMED

    async def _refresh_entities(self) -> None:
        entities = await self.board.entities()
        if entities != self._entities:
            self._entities = entities
            self._bump()

    async def _count_trash(self) -> None:
        size = 0
        async for _ in self.board.trashed():
            size += 1
        if size != self._trash_size:
            self._trash_size = size
            self._bump()

    async def _every(self, interval: float, action: Callable[[], Awaitable[None]]) -> None:
        while self.board.is_open:
            await anyio.sleep(interval)
            await self._retrying(action)

    async def _retrying(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action``; while it fails, mark the view unhealthy and retry (until the board closes).

        An unreachable backend is expected and logged once; any other board error is logged as
        an error each time (the view keeps going: one bad read must not end it).
        """
        delay, failed = 0.1, False
        while self.board.is_open:
            try:
                await action()
            except BoardClosed:
                return
            except BackendUnavailable as error:
                if self._healthy:
                    logger.warning("live view of %s: %s; retrying", self.board.url, error)
                failed = True
            except JobBoardError as error:
                logger.error("live view of %s: %s; retrying", self.board.url, error)
                failed = True
            else:
                if failed:
                    self._healthy = True
                    self._bump()
                return
            if self._healthy:
                self._healthy = False
                self._bump()
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)
