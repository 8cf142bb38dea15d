"""A board's live picture of its ZooKeeper directories, kept by recursive watches.

Every create and delete under ``jobs/``, ``waiting/``, ``locks/`` and ``trash/``
arrives as one watch event, in server order and before the reply to the write
that caused it. So the view is current for this board's own writes, costs O(1)
per change (no re-listing per claim), and its events are exact. After a
reconnect the watches are added again and the directories re-listed once.
"""

from __future__ import annotations

import bisect
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator

import anyio

from jobboard.board.events import Event, EventKind
from jobboard.job import wanted
from jobboard_zookeeper.layout import Paths, is_job_id
from jobboard_zookeeper.ops import Stat
from jobboard_zookeeper.zk import CREATED, DELETED, ZooKeeper

logger = logging.getLogger(__name__)

RECENT_TRASH = 10_000
WORK = "work"
"""Channel: a job became claimable (posted, released, ready)."""
SETTLED = "settled"
"""Channel: a job left the board, or a lock came or went."""
CHANNELS = (WORK, SETTLED)
WATCHED = ("jobs", "waiting", "locks", "trash")
SPREAD = 64
"""Candidates a contended claim_next chooses from at random."""


class SortedIds:
    """Job ids in board order: a sorted list plus a set for membership.

    Removal only drops the id from the set (O(1)); the list is compacted once
    more than half of it is stale, so a consume does not shift a 50k-entry list.
    New ids are nearly always the largest, so insertion appends.
    """

    def __init__(self) -> None:
        self._ordered: list[str] = []
        self._members: set[str] = set()
        self._head = 0
        """Entries before this index are all stale (jobs are mostly taken from the head)."""

    def add(self, job_id: str) -> bool:
        if job_id in self._members:
            return False
        self._members.add(job_id)
        index = bisect.bisect_left(self._ordered, job_id)
        if index == len(self._ordered) or self._ordered[index] != job_id:  # else: a stale entry, reused
            self._ordered.insert(index, job_id)
        self._head = min(self._head, index)
        return True

    def discard(self, job_id: str) -> bool:
        if job_id not in self._members:
            return False
        self._members.discard(job_id)
        if len(self._ordered) > 64 and len(self._members) < len(self._ordered) // 2:
            self._ordered = [job for job in self._ordered if job in self._members]
            self._head = 0
        return True

    def after(self, job_id: str) -> str | None:
        """The first id after ``job_id`` in board order (``""`` starts at the head)."""
        if job_id:
            index = bisect.bisect_right(self._ordered, job_id)
        else:
            while self._head < len(self._ordered) and self._ordered[self._head] not in self._members:
                self._head += 1
            index = self._head
        while index < len(self._ordered):
            if self._ordered[index] in self._members:
                return self._ordered[index]
            index += 1
        return None

    def replace(self, job_ids: list[str]) -> None:
        self._members = set(job_ids)
        self._ordered = sorted(self._members)
        self._head = 0

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._members

    def __len__(self) -> int:
        return len(self._members)

    def ordered(self) -> list[str]:
        return [job for job in self._ordered if job in self._members]


class BoardView:
    """Jobs, waiting jobs, locks and recent trash, as this board last heard."""

    def __init__(self, zk: ZooKeeper, paths: Paths, publish: Callable[[Event], None]) -> None:
        self._zk, self._paths, self._publish = zk, paths, publish
        self.jobs = SortedIds()
        self.waiting = SortedIds()
        self.locks: set[str] = set()
        self._recent_trash: OrderedDict[str, None] = OrderedDict()
        self._left_waiting: set[str] = set()
        self._waiters: dict[str, list[anyio.Event]] = {channel: [] for channel in CHANNELS}
        self._skip: dict[str, float] = {}
        self._sync_log: list[tuple[int, str]] | None = None
        self._sync_lock = anyio.Lock()
        self.lock_changes: dict[str, int] = {}
        """How many times each job's lock was created or deleted (cleared with the job)."""
        self.names: dict[str, str] = {}
        """Job names seen so far (a name never changes), to filter without reading."""
        self.prefetched: dict[str, tuple[bytes, Stat] | None] = {}
        """Job nodes read ahead for claims (see ``claiming.ReadAhead``); an entry goes when its job changes."""
        self._handlers = {"jobs": self._on_job, "waiting": self._on_waiting,
                          "locks": self._on_lock, "trash": self._on_trash}

    def candidates(self, skip: set[str], names: Collection[str] | None = None) -> Iterator[str]:
        """Unclaimed jobs in board order, lazily: O(log n) a step, safe while the view changes.

        Jobs in ``skip``, jobs known to be delayed or malformed, and jobs known
        to have a name outside ``names`` are passed over.
        """
        job_id = self.jobs.after("")
        while job_id is not None:
            if job_id not in self.locks and job_id not in skip and not self._skipped(job_id):
                name = self.names.get(job_id)
                if name is None or wanted(name, names):
                    yield job_id
            job_id = self.jobs.after(job_id)

    def skip_until(self, job_id: str, until: float) -> None:
        """Pass over ``job_id`` until ``until`` (epoch seconds) or until its node changes."""
        self._skip[job_id] = until

    def next_delay_end(self) -> float | None:
        """Seconds until the earliest known delay of a job on the board ends, if any."""
        ends = [until for job_id, until in self._skip.items() if until != float("inf") and job_id in self.jobs]
        return max(0.0, min(ends) - time.time()) if ends else None

    def watches(self, job_id: str) -> bool:
        """Whether this view hears about ``job_id``'s changes (a flat board's: every job's)."""
        return True

    def skipped(self, job_id: str) -> bool:
        """Whether ``job_id`` is passed over now (delayed or malformed, as far as known)."""
        return self._skipped(job_id)

    def _skipped(self, job_id: str) -> bool:
        until = self._skip.get(job_id)
        if until is None:
            return False
        if until > time.time():
            return True
        del self._skip[job_id]
        return False

    def change(self, channel: str) -> anyio.Event:
        """An event set at the next change on ``channel`` (:data:`WORK` or :data:`SETTLED`).

        Take it *before* checking a condition.
        """
        waiter = anyio.Event()
        self._waiters[channel].append(waiter)
        return waiter

    def notify(self, *channels: str) -> None:
        """Wake the waiters of ``channels`` (all channels when none is named)."""
        for channel in channels or CHANNELS:
            waiters, self._waiters[channel] = self._waiters[channel], []
            for waiter in waiters:
                waiter.set()

    # -- synchronising -------------------------------------------------------

    async def sync(self, *, report: bool) -> None:
        """(Re)add the watches, then re-list every directory once.

        Events that arrive meanwhile are logged and replayed over the listings:
        every change makes one event and events come in server order, so the last
        event about a node decides its state, and the listing decides the rest.

        :param report: publish events for what changed since the last picture.
        """
        async with self._sync_lock:
            self._sync_log = []
            try:
                listed = await self._list_all()
            finally:
                log, self._sync_log = self._sync_log, None
            if report:
                self._report_differences(listed)
            self.jobs.replace(listed["jobs"])
            self.waiting.replace(listed["waiting"])
            self.locks = set(listed["locks"])
            for job_id in listed["trash"][-RECENT_TRASH:]:
                self._remember_trash(job_id)
            for kind, path in log:
                self._on_event(kind, path)
            self.notify()

    async def _list_all(self) -> dict[str, list[str]]:
        for name in WATCHED:
            await self._zk.watch_tree(self._paths.dir(name), self._on_event)
        listed = {}
        for name in WATCHED:
            children = await self._zk.children(self._paths.dir(name))
            listed[name] = [c for c in (children[0] if children else []) if is_job_id(c)]
        return listed

    def _report_differences(self, listed: dict[str, list[str]]) -> None:
        now_present = set(listed["jobs"]) | set(listed["waiting"])
        trash = set(listed["trash"])
        for job_id in (set(self.jobs.ordered()) | set(self.waiting.ordered())) - now_present:
            kind = EventKind.TRASHED if job_id in trash else EventKind.CONSUMED
            self._publish(Event(kind, job_id, "seen after reconnecting"))
        for job_id in sorted(now_present - set(self.jobs.ordered()) - set(self.waiting.ordered())):
            self._publish(Event(EventKind.POSTED, job_id, "seen after reconnecting"))

    # -- watch events ----------------------------------------------------------

    def _on_event(self, kind: int, path: str) -> None:
        if self._sync_log is not None:
            self._sync_log.append((kind, path))
            return
        relative = path[len(self._paths.root) + 1:].split("/")
        if len(relative) != 2 or relative[0] not in self._handlers or not is_job_id(relative[1]):
            return
        self._handlers[relative[0]](kind, relative[1])

    def _on_job(self, kind: int, job_id: str) -> None:
        self._skip.pop(job_id, None)
        self.prefetched.pop(job_id, None)
        if kind == CREATED and self.jobs.add(job_id):
            ready = job_id in self._left_waiting
            self._left_waiting.discard(job_id)
            self._publish(Event(EventKind.READY if ready else EventKind.POSTED, job_id))
            self.notify(WORK)
        elif kind == DELETED and self.jobs.discard(job_id):
            self.names.pop(job_id, None)
            self.lock_changes.pop(job_id, None)
            trashed = job_id in self._recent_trash
            self._publish(Event(EventKind.TRASHED if trashed else EventKind.CONSUMED, job_id))
            self.notify(SETTLED)

    def _on_waiting(self, kind: int, job_id: str) -> None:
        if kind == CREATED and self.waiting.add(job_id):
            self._publish(Event(EventKind.POSTED, job_id, "waiting for dependencies"))
        elif kind == DELETED and self.waiting.discard(job_id):
            self.names.pop(job_id, None)
            self.notify(SETTLED)
            if job_id in self._recent_trash:
                self._publish(Event(EventKind.TRASHED, job_id))
            else:
                self._left_waiting.add(job_id)

    def _on_lock(self, kind: int, job_id: str) -> None:
        if job_id in self.jobs:
            self.lock_changes[job_id] = self.lock_changes.get(job_id, 0) + 1
        if kind == CREATED and job_id not in self.locks:
            self.locks.add(job_id)
            self._publish(Event(EventKind.CLAIMED, job_id))
            self.notify(SETTLED)
        elif kind == DELETED and job_id in self.locks:
            self.locks.discard(job_id)
            if job_id in self.jobs:  # settles delete the job before the lock
                self._publish(Event(EventKind.RELEASED, job_id))
                self.notify(WORK)
            self.notify(SETTLED)

    def _on_trash(self, kind: int, job_id: str) -> None:
        if kind == CREATED:
            self._remember_trash(job_id)
        elif kind == DELETED:  # purged, expired or requeued: a later settle is not a trash
            self._recent_trash.pop(job_id, None)

    def _remember_trash(self, job_id: str) -> None:
        self._recent_trash[job_id] = None
        while len(self._recent_trash) > RECENT_TRASH:
            self._recent_trash.popitem(last=False)


class CandidatePicker:
    """Board order first; after a lost race, a random pick among the next few candidates.

    Claimers on other boards race for the same head jobs: once one race is lost,
    spreading out costs a little order and saves most of the lost races.
    """

    def __init__(self, candidates: Iterator[str]) -> None:
        self._candidates = candidates
        self._window: list[str] = []
        self.contended = False

    def next(self, locked: set[str]) -> str | None:
        if not self.contended:
            return next(self._candidates, None)
        self._window = [job for job in self._window if job not in locked]
        while len(self._window) < SPREAD and (job := next(self._candidates, None)) is not None:
            self._window.append(job)
        return self._window.pop(random.randrange(len(self._window))) if self._window else None
