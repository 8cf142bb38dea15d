"""The live view of a partitioned board: only the partitions this board needs are watched.

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
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from jobboard.board.events import Event
from jobboard.errors import JobBoardError
from jobboard_zookeeper.layout import is_job_id
from jobboard_zookeeper.ops import Create
from jobboard_zookeeper.partitions import PARTITIONED, PartitionedPaths, add_watch, remove_watch, route
from jobboard_zookeeper.view import BoardView
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

SETTLE_DELAY = 0.02
"""Seconds a change of membership or of pins waits for more before the view is re-listed."""
UNPIN_DELAY = 1.0
"""Seconds a pinned partition stays watched after its last pin (a worker that steals often
from one partition does not re-list it for every job)."""


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
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]) -> None:
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
        route(zk, paths.dir("members"), self._on_member)

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
            await add_watch(zk, paths.dir("members"))
            await self._list_members()
        wanted, observe = self.wanted(), self.sees_all()
        for name in PARTITIONED:
            route(zk, paths.dir(name), self._on_event)
        if observe:
            route(zk, paths.dir("trash"), self._on_event)
        dropped = self._watched - wanted
        await asyncio.gather(
            *(add_watch(zk, paths.part_dir(name, k)) for k in sorted(wanted) for name in PARTITIONED),
            *(remove_watch(zk, paths.part_dir(name, k)) for k in sorted(dropped) for name in PARTITIONED),
            *([add_watch(zk, paths.dir("trash"))] if observe else
              [remove_watch(zk, paths.dir("trash"))] if self._trash_watched else []))
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
