"""What a partitioned board adds to the ZooKeeper board: joining, stealing, idle polls, pins.

On a flat board every method here does what the flat board did (one attribute test).

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

import abc
import asyncio
import time
from collections.abc import Collection

from jobboard.board.events import EventHub
from jobboard.job import Claim, Job, Outcome, wanted
from jobboard_zookeeper.base import ZooKeeperBase
from jobboard_zookeeper.fleet import PartitionedView
from jobboard_zookeeper.layout import is_job_id, sequence_of
from jobboard_zookeeper.linked import Stored
from jobboard_zookeeper.partitions import PartitionedPaths, descendants
from jobboard_zookeeper.view import BoardView
from jobboard_zookeeper.zk import ZooKeeper

POLL_FIRST = 0.05
POLL_CAP = 1.0
"""Seconds between polls of the other partitions by an idle ``wait``, at most."""


class FleetBoard(ZooKeeperBase):
    """The partitioned layout's part of :class:`~jobboard_zookeeper.board.ZooKeeperBackend`."""

    hub: EventHub
    _inflight: set[str]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._must_join = False
        """A partitioned board that has not joined the members yet (tested by every claim_next)."""
        self._foreign_now: asyncio.Task[list[str]] | None = None
        """The listing of the other partitions in flight."""
        self._foreign_next: asyncio.Task[list[str]] | None = None
        """The listing that starts when the one in flight ends (callers join it until it starts)."""
        self._idle_polls = 0
        self.steals = 0
        """Jobs claimed from partitions of other members (for benchmarks)."""

    @abc.abstractmethod
    async def _try_claim(self, job: str, stored: Stored, owner: str) -> Claim | str:
        """Claim a job as read, or say why not (``delayed``, ``changed`` ...)."""

    @abc.abstractmethod
    async def _claim_watch(self, claim: Claim) -> str:
        """``watch_claim`` on what the view holds."""

    @abc.abstractmethod
    async def _completion(self, job: str) -> Outcome:
        """``wait_for_completion`` on what the view holds."""

    def _make_view(self, zk: ZooKeeper) -> BoardView:
        paths = self._paths
        if not isinstance(paths, PartitionedPaths):
            return BoardView(zk, paths, self.hub.publish)
        self._must_join = True
        return PartitionedView(zk, paths, self.hub.publish, self.services.spawn)

    @property
    def _fleet(self) -> PartitionedView | None:
        return self.view if isinstance(self.view, PartitionedView) else None

    async def _join(self) -> None:
        """Become a member of the partitioned board's fleet (first claim_next or wait)."""
        if (fleet := self._fleet) is not None:
            await fleet.join()
        self._must_join = False

    # -- stealing and polling ---------------------------------------------------------

    async def _steal(self, owner: str, names: Collection[str] | None) -> Claim | None:
        """Claim the best unclaimed job of the partitions this board does not watch, if any."""
        if self._fleet is None:
            return None
        for job in await self._foreign_unclaimed():
            if job in self._inflight:
                continue
            self._inflight.add(job)
            try:
                found = await self._readable(job, names)
                outcome = None if found is None else await self._try_claim(job, found, owner)
            finally:
                self._inflight.discard(job)
            if isinstance(outcome, Claim):
                self.steals += 1
                self._idle_polls = 0
                return outcome
            if outcome == "delayed" and found is not None and found.posting.not_before is not None:
                self.view.skip_until(job, found.posting.not_before)
        return None

    async def _foreign_claimable(self, names: Collection[str] | None) -> Job | None:
        """The first claimable job of the partitions this board does not watch (for ``wait``)."""
        if self._fleet is None:
            return None
        for job in await self._foreign_unclaimed():
            found = await self._readable(job, names)
            if found is None:
                continue
            not_before = found.posting.not_before
            if not_before is not None and not_before > time.time():
                self.view.skip_until(job, not_before)
                continue
            self._idle_polls = 0
            return found.posting.to_job(job, sequence_of(job))
        self._idle_polls += 1
        return None

    async def _readable(self, job: str, names: Collection[str] | None) -> Stored | None:
        """A foreign job as read, if it is a candidate (known delays pass over it unread)."""
        if self.view.skipped(job):
            return None
        stored = await self._stored(job, claimable_only=True)
        if stored is None or not wanted(stored.posting.name, names):
            return None
        return stored

    def _wake_after(self, delay: float | None) -> float | None:
        """How long an idle ``wait`` may sleep: at most until its next poll of the other partitions."""
        fleet = self._fleet
        if fleet is None or not fleet.foreign():
            return delay
        poll = min(POLL_FIRST * float(2 ** min(self._idle_polls, 10)), POLL_CAP)
        return poll if delay is None else min(delay, poll)

    async def _foreign_unclaimed(self) -> list[str]:
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
        fleet, paths = self._fleet, self._paths
        assert fleet is not None and isinstance(paths, PartitionedPaths)
        if not fleet.foreign():
            return []
        jobs_below, locks_below = await asyncio.gather(descendants(self.zk, paths.dir("jobs")),
                                                       descendants(self.zk, paths.dir("locks")))
        if jobs_below <= locks_below:  # jobs (and links) below jobs/ vs. claims: nothing unclaimed anywhere
            return []
        parts = fleet.foreign()
        jobs = await asyncio.gather(*(self.zk.children(paths.part_dir("jobs", k)) for k in parts))
        busy = [(k, found[0]) for k, found in zip(parts, jobs, strict=True) if found and found[0]]
        locks = await asyncio.gather(*(self.zk.children(paths.part_dir("locks", k)) for k, _ in busy))
        unclaimed: list[str] = []
        for (_, children), locked in zip(busy, locks, strict=True):
            taken = set(locked[0]) if locked else set()
            unclaimed += [job for job in children if job not in taken and is_job_id(job)]
        return sorted(unclaimed)

    # -- watching one job -------------------------------------------------------------

    async def watch_claim(self, claim: Claim) -> str:
        fleet = self._fleet
        if fleet is None or fleet.sees_all() or not self._open:
            return await self._claim_watch(claim)
        await fleet.pin(claim.job.id)
        try:
            return await self._claim_watch(claim)
        finally:
            fleet.unpin(claim.job.id)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        found, fleet = job_id, self._fleet
        if fleet is None or fleet.sees_all():
            return await self._completion(found)
        await fleet.pin(found)
        try:
            return await self._completion(found)
        finally:
            fleet.unpin(found)

    def observed(self) -> None:
        if (fleet := self._fleet) is not None:
            fleet.observe()
