"""A partitioned board's fleet: its live view (:class:`PartitionedView`, only the partitions this board
needs are watched) and what a member does besides (:class:`Fleet`: joining, listing the other
partitions, idle polls, pins). A flat board has no fleet.

A board that claims (its first ``claim_next`` or ``wait``) becomes a *member*: it creates
an ephemeral ``members/<name>`` node and watches ``members/`` (one event per membership
change). With the members sorted by name, member i of N owns the partitions
``k ≡ i (mod N)`` and watches only those (``jobs/p<k>``, ``waiting/p<k>``,
``locks/p<k>``: persistent recursive watches, removed when the partition is lost).
Besides its own partitions a member watches a partition while it needs it for one job
(a *pin*: ``watch_claim`` of a stolen claim, ``wait_for_completion``).

A board that does not claim, or that subscribed to ``events()``, is an *observer*: it
watches every partition and ``trash/``, exactly as a flat board does.

Every change of what is watched re-lists the watched partitions (as after a reconnect,
see :meth:`BoardView.sync`); jobs of a partition that is no longer watched leave the
view without events.

What a member does (:class:`Fleet`, used by :mod:`.claiming` and :mod:`.watching`):

* ``claim_next`` first joins the members (once), then claims from its own partitions as
  on a flat board; when those have nothing claimable it *steals*: it lists the other
  partitions (their ``jobs/p<k>``, then ``locks/p<k>`` of those that have jobs; pipelined,
  shared by the claimers that ask before it is sent, never reused; skipped when two
  ``getAllChildrenNumber`` requests show no more jobs than claims on the whole board) and claims
  the best unclaimed job there with the ordinary claim multi. So it returns a claimable job
  whenever one exists anywhere, as the contract says.
* ``wait`` returns work of its own partitions at once (watch events); for work in other
  partitions it polls the same listing, every :data:`POLL_FIRST` seconds doubling to
  :data:`POLL_CAP` while nothing is found: work posted into a partition another member owns
  is seen within ``POLL_CAP`` seconds (plus a listing) when that member does not take it first.
* ``watch_claim`` and ``wait_for_completion`` of a job in a partition the board does not
  watch pin that partition while they run (:meth:`PartitionedView.pin`).
* ``events()`` makes the board an observer (every partition and the trash are watched).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from jobboard.board.events import Event
from jobboard.errors import JobBoardError
from jobboard_zookeeper.layout import Paths, is_job_id
from jobboard_zookeeper.ops import Create
from jobboard_zookeeper.partitions import PARTITIONED, PartitionedPaths
from jobboard_zookeeper.view import BoardView
from jobboard_zookeeper.zk import ZooKeeper

T = TypeVar("T")
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]

logger = logging.getLogger(__name__)

SETTLE_DELAY = 0.02
"""Seconds a change of membership or of pins waits for more before the view is re-listed."""
UNPIN_DELAY = 1.0
"""Seconds a pinned partition stays watched after its last pin (a worker that steals often
from one partition does not re-list it for every job)."""
POLL_FIRST = 0.05
POLL_CAP = 1.0
"""Seconds between polls of the other partitions by an idle ``wait``, at most."""


def owned_partitions(members: list[str], me: str, partitions: int) -> set[int]:
    """The partitions member ``me`` owns: ``k ≡ i (mod N)``, i its rank among the sorted members."""
    ranked = sorted(members)
    if me not in ranked:
        return set()
    index = ranked.index(me)
    return set(range(index, partitions, len(ranked)))


class PartitionedView(BoardView):
    """A :class:`BoardView` of the partitions this board owns, pins or observes (see the module)."""

    def __init__(self, zk: ZooKeeper, paths: PartitionedPaths, publish: Callable[[Event], None],
                 spawn: Spawn) -> None:
        super().__init__(zk, paths, publish)
        self._ppaths, self._spawn = paths, spawn
        self.name = uuid.uuid4().hex
        self.member = False
        self.observer = False
        """Subscribed to events: watching everything, member or not."""
        self.owned: set[int] = set()
        self.pins: Counter[int] = Counter()
        self._lingering: set[int] = set()
        self.current: frozenset[int] = frozenset()
        """The partitions the view holds (set by the last listing)."""
        self._watched: set[int] = set()
        self._trash_watched = False
        self._dirty = False
        self._resync: asyncio.Task[None] | None = None
        self._joined: asyncio.Future[None] | None = None
        self._cut = len(paths.root) + 1
        zk.route(paths.dir("members"), self._on_member)

    # -- what is watched -----------------------------------------------------------

    def sees_all(self) -> bool:
        return self.observer or not self.member

    def wanted(self) -> set[int]:
        if self.sees_all():
            return set(range(self._ppaths.partitions))
        return self.owned | {k for k, count in self.pins.items() if count > 0} | self._lingering

    def watches(self, job_id: str) -> bool:
        """Whether this view hears about ``job_id``'s changes."""
        return self._ppaths.partition_of(job_id) in self.current

    def foreign(self) -> list[int]:
        """The partitions this view does not hold (a member lists them to steal)."""
        return [k for k in range(self._ppaths.partitions) if k not in self.current]

    async def join(self) -> None:
        """Become a member (once; later calls wait for the first to finish)."""
        if self._joined is None:
            self._joined = asyncio.get_running_loop().create_future()
            try:
                self.member = True
                await self.sync(report=False)
                self._joined.set_result(None)
            except BaseException as error:
                self.member, joined, self._joined = False, self._joined, None
                joined.set_exception(error)
                joined.exception()  # retrieved: the next call tries again
                raise
        await asyncio.shield(self._joined)

    def observe(self) -> None:
        """Watch every partition and the trash from now on (``events()``: a stream sees everything)."""
        if not self.observer:
            self.observer = True
            self._changed()

    async def pin(self, job_id: str) -> None:
        """Watch ``job_id``'s partition (listed before this returns) until :meth:`unpin`."""
        partition = self._ppaths.partition_of(job_id)
        self.pins[partition] += 1
        self._lingering.discard(partition)
        if partition not in self.current:
            await self.resynced()

    def unpin(self, job_id: str) -> None:
        partition = self._ppaths.partition_of(job_id)
        self.pins[partition] -= 1
        if self.pins[partition] <= 0:
            del self.pins[partition]
            if partition not in self.owned and partition in self.current:
                self._lingering.add(partition)
                asyncio.get_running_loop().call_later(UNPIN_DELAY, self._expire_pin, partition)

    def _expire_pin(self, partition: int) -> None:
        if partition in self._lingering and not self.pins.get(partition):
            self._lingering.discard(partition)
            self._changed()

    async def resynced(self) -> None:
        """Re-list now if what is wanted differs from what is held."""
        if self.wanted() != self.current or self.sees_all() != self._trash_watched:
            await self.sync(report=False)

    def _changed(self) -> None:
        self._dirty = True
        if self._resync is None or self._resync.done():
            self._resync = self._spawn(self._settle())

    async def _settle(self) -> None:
        await asyncio.sleep(SETTLE_DELAY)
        while self._dirty:
            self._dirty = False
            try:
                if self.member:
                    await self._list_members()
                await self.resynced()
            except JobBoardError as error:  # a reconnect re-lists everything anyway
                logger.debug("could not re-list partitions: %s", error)

    def _on_member(self, kind: int, path: str) -> None:
        if self.member:
            self._changed()

    async def _list_members(self) -> None:
        found = await self._zk.children(self._paths.dir("members"))
        self.owned = owned_partitions(found[0] if found else [], self.name, self._ppaths.partitions)

    # -- listing (called by BoardView.sync, under its lock) ----------------------------

    async def _list_all(self) -> dict[str, list[str]]:
        zk, paths = self._zk, self._ppaths
        if self.member:
            await zk.multi([Create(paths.dir("members") + "/" + self.name, ephemeral=True)], retry_safe=True)
            await zk.add_watch(paths.dir("members"))
            await self._list_members()
        wanted, observe = self.wanted(), self.sees_all()
        for name in PARTITIONED:
            zk.route(paths.dir(name), self._on_event)
        if observe:
            zk.route(paths.dir("trash"), self._on_event)
        dropped = self._watched - wanted
        await asyncio.gather(
            *(zk.add_watch(paths.part_dir(name, k)) for k in sorted(wanted) for name in PARTITIONED),
            *(zk.remove_watches(paths.part_dir(name, k)) for k in sorted(dropped) for name in PARTITIONED),
            *([zk.add_watch(paths.dir("trash"))] if observe else
              [zk.remove_watches(paths.dir("trash"))] if self._trash_watched else []))
        self._watched, self._trash_watched, self.current = set(wanted), observe, frozenset(wanted)
        if dropped:
            self.prefetched.clear()
        where = [(name, paths.part_dir(name, k)) for name in PARTITIONED for k in sorted(wanted)]
        where += [("trash", paths.dir("trash"))] if observe else []
        listed = await asyncio.gather(*(zk.children(path) for _, path in where))
        result: dict[str, list[str]] = {name: [] for name in (*PARTITIONED, "trash")}
        for (name, _), found in zip(where, listed, strict=True):
            result[name] += [child for child in (found[0] if found else []) if is_job_id(child)]
        return result

    # -- watch events ----------------------------------------------------------------

    def _on_event(self, kind: int, path: str) -> None:
        if self._sync_log is not None:
            self._sync_log.append((kind, path))
            return
        relative = path[self._cut:].split("/")
        if len(relative) == 3:
            partition = relative[1][1:]
            if (relative[0] in PARTITIONED and partition.isdigit() and int(partition) in self.current
                    and is_job_id(relative[2])):
                self._handlers[relative[0]](kind, relative[2])
        elif len(relative) == 2 and relative[0] == "trash" and self._trash_watched and is_job_id(relative[1]):
            self._on_trash(kind, relative[1])


class Fleet:
    """What a board does as a member of a partitioned board's fleet (see the module docstring). Only a
    partitioned board has one: a flat board's claimers and waiters hold ``None`` (decided at open)."""

    def __init__(self, session: Callable[[], ZooKeeper], paths: PartitionedPaths, view: PartitionedView) -> None:
        self._session, self._paths, self.view = session, paths, view
        self.must_join = True
        """This board has not joined the members yet (tested by every claim_next and wait)."""
        self._foreign_now: asyncio.Task[list[str]] | None = None
        """The listing of the other partitions in flight."""
        self._foreign_next: asyncio.Task[list[str]] | None = None
        """The listing that starts when the one in flight ends (callers join it until it starts)."""
        self._idle_polls = 0

    @property
    def zk(self) -> ZooKeeper:
        """The board's open session. :raises BoardClosed: the board is closed."""
        return self._session()

    async def join(self) -> None:
        """Become a member of the partitioned board's fleet (first claim_next or wait)."""
        await self.view.join()
        self.must_join = False

    def observe(self) -> None:
        """Someone subscribed to the events: watch everything from now on."""
        self.view.observe()

    async def pinned(self, job_id: str, watch: Callable[[], Awaitable[T]]) -> T:
        """``watch()``, with ``job_id``'s partition watched while it runs (as it is unless this board is a
        member that does not hold the partition)."""
        view = self.view
        if view.sees_all():
            return await watch()
        await view.pin(job_id)
        try:
            return await watch()
        finally:
            view.unpin(job_id)

    # -- the other partitions: stealing and polling ----------------------------------

    def found(self) -> None:
        """Work was found in the other partitions: the next idle ``wait`` polls them soon."""
        self._idle_polls = 0

    def missed(self) -> None:
        """An idle ``wait`` found nothing there: it polls them less often."""
        self._idle_polls += 1

    def wake_after(self, delay: float | None) -> float | None:
        """How long an idle ``wait`` may sleep: at most until its next poll of the other partitions."""
        if not self.view.foreign():
            return delay
        poll = min(POLL_FIRST * float(2 ** min(self._idle_polls, 10)), POLL_CAP)
        return poll if delay is None else min(delay, poll)

    async def unclaimed(self) -> list[str]:
        """Unclaimed jobs of the partitions this board does not watch, in board order, as listed
        after this call began (so a job posted before it is in): concurrent callers share a
        listing that had not been sent when they asked."""
        task = self._foreign_next
        if task is None:
            task = self._foreign_next = asyncio.get_running_loop().create_task(self._list_after(self._foreign_now))
            task.add_done_callback(lambda done: done.cancelled() or done.exception())  # callers may be gone
        return list(await asyncio.shield(task))

    async def _list_after(self, previous: asyncio.Task[list[str]] | None) -> list[str]:
        if previous is not None:
            await asyncio.wait([previous])
        self._foreign_now, self._foreign_next = self._foreign_next, None  # callers from now on need a new one
        return await self._list_foreign()

    async def _list_foreign(self) -> list[str]:
        view, paths = self.view, self._paths
        if not view.foreign():
            return []
        jobs_below, locks_below = await asyncio.gather(self.zk.descendants(paths.dir("jobs")),
                                                       self.zk.descendants(paths.dir("locks")))
        if jobs_below <= locks_below:  # jobs (and links) below jobs/ vs. claims: nothing unclaimed anywhere
            return []
        parts = view.foreign()
        jobs = await asyncio.gather(*(self.zk.children(paths.part_dir("jobs", k)) for k in parts))
        busy = [(k, found[0]) for k, found in zip(parts, jobs, strict=True) if found and found[0]]
        locks = await asyncio.gather(*(self.zk.children(paths.part_dir("locks", k)) for k, _ in busy))
        unclaimed: list[str] = []
        for (_, children), locked in zip(busy, locks, strict=True):
            taken = set(locked[0]) if locked else set()
            unclaimed += [job for job in children if job not in taken and is_job_id(job)]
        return sorted(unclaimed)


def make_view(zk: ZooKeeper, paths: Paths, publish: Callable[[Event], None], spawn: Spawn,
              session: Callable[[], ZooKeeper]) -> tuple[BoardView, Fleet | None]:
    """The live view of the board's layout and its fleet: a flat board's view and no fleet, or a
    partitioned board's view and the fleet that works it."""
    if isinstance(paths, PartitionedPaths):
        view = PartitionedView(zk, paths, publish, spawn)
        return view, Fleet(session, paths, view)
    return BoardView(zk, paths, publish), None
