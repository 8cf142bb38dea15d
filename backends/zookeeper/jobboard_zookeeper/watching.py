"""Waiting on ZooKeeper: ``wait``, ``watch_claim`` and ``wait_for_completion`` (:class:`Watcher`).

Each waits on the live view's channels (:data:`~jobboard_zookeeper.view.WORK`: a job became
claimable; :data:`~jobboard_zookeeper.view.SETTLED`: a job left or a lock came or went), taking
the channel's event *before* it checks, so no change is missed (a permit returned or a flow-control change
wakes :data:`~jobboard_zookeeper.view.WORK` too; ``wait`` passes over what flow control holds back and
sleeps at most until a rate's next permit); reads only what a change makes
worth reading. A partitioned board's member polls the partitions it does not watch, and pins a
job's partition while it watches that job (:mod:`jobboard_zookeeper.fleet`). Closing the board
wakes every waiter: ``wait`` and ``wait_for_completion`` raise ``BoardClosed``, ``watch_claim``
returns ``"board closed"``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection

import anyio

from jobboard.errors import BackendUnavailable, BoardClosed
from jobboard.job import Claim, Job, Outcome, wanted
from jobboard_zookeeper.fleet import Fleet
from jobboard_zookeeper.flow import Flow, Skips
from jobboard_zookeeper.layout import sequence_of
from jobboard_zookeeper.posting import Poster
from jobboard_zookeeper.reading import Reader, Session
from jobboard_zookeeper.settle import Settler
from jobboard_zookeeper.view import SETTLED, WORK, BoardView

READ_BATCH = 256
"""Candidates ``wait`` reads at most before it sleeps."""
RATE_WAKE_SLACK = 0.01
"""Seconds ``wait`` sleeps past a rate's next permit: the grants made within that time after the oldest are
due too by then (two claims a few round trips apart), so one wake finds their permits together. Every grant
of a busy group comes that much (and a claim's round trips) after its permit, window by window: 0.05 s gave a
mean of 19.3/s for a rate of 20/s on 4 processes, 0.01 s 19.9/s (issue 27's 30-s run, load 7-11)."""


class Watcher:
    """``wait``, ``watch_claim`` and ``wait_for_completion`` for one board (see the module docstring);
    ``fleet`` is a partitioned board's, ``None`` on a flat board."""

    def __init__(self, session: Session, view: BoardView, settler: Settler, poster: Poster, reader: Reader,
                 fleet: Fleet | None, flow: Flow, ensure_open: Callable[[], None]) -> None:
        self._session, self._view, self._settler, self._poster = session, view, settler, poster
        self._reader, self._fleet, self._flow, self._ensure_open = reader, fleet, flow, ensure_open

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        """The first claimable job, once there is one. :raises BoardClosed: the board closed meanwhile."""
        fleet = self._fleet
        if fleet is not None and fleet.must_join:
            await fleet.join()
        while True:
            self._ensure_open()  # aclose() wakes waiters: they must not wait on
            change = self._view.change(WORK)
            skips = Skips(self._flow)
            ready = await self._first_claimable(names, skips)
            if ready is not None:
                return [ready]  # the first one found: callers claim, they need not read on
            delay = self._view.next_delay_end()
            if fleet is not None:
                delay = fleet.wake_after(delay)
            if skips.due is not None:  # a rate's next permit (and those granted just after it: one wake)
                due = skips.due + RATE_WAKE_SLACK
                delay = due if delay is None else min(delay, due)
            with anyio.move_on_after(float("inf") if delay is None else delay):
                await change.wait()

    async def _first_claimable(self, names: Collection[str] | None, skips: Skips) -> Job | None:
        """The first claimable job in board order; delayed ones are remembered and passed over, and
        those flow control holds back passed over (``skips``)."""
        for job in itertools.islice(self._view.candidates(set(), names), READ_BATCH):
            if skips.passes_over_unread(job):  # a held group's job, its group known: not read again
                continue
            stored = await self._reader.stored(job, claimable_only=True)
            if stored is None or not wanted(stored.posting.name, names):
                continue
            not_before = stored.posting.not_before
            if not_before is not None and not_before > time.time():
                self._view.skip_until(job, not_before)
                continue
            if await skips.held(job, stored.posting):
                continue
            return stored.posting.to_job(job, sequence_of(job))
        return await self._foreign_claimable(self._fleet, names, skips) if self._fleet is not None else None

    async def _foreign_claimable(self, fleet: Fleet, names: Collection[str] | None, skips: Skips) -> Job | None:
        """The first claimable job of the partitions this board does not watch."""
        for job in await fleet.unclaimed():
            found = await self._reader.readable(job, names)
            if found is None:
                continue
            not_before = found.posting.not_before
            if not_before is not None and not_before > time.time():
                self._view.skip_until(job, not_before)
                continue
            if await skips.held(job, found.posting):
                continue
            fleet.found()
            return found.posting.to_job(job, sequence_of(job))
        fleet.missed()
        return None

    async def watch_claim(self, claim: Claim) -> str:
        """Why ``claim`` stopped being current, once it did (see ``JobBoard.watch_claim``)."""
        try:
            self._ensure_open()
        except BoardClosed:
            return "board closed"
        if self._fleet is None:
            return await self._claim_watch(claim)
        return await self._fleet.pinned(claim.job.id, lambda: self._claim_watch(claim))

    async def _claim_watch(self, claim: Claim) -> str:
        job, seen = claim.job.id, None
        while True:
            try:
                self._ensure_open()
            except BoardClosed:
                return "board closed"
            change = self._view.change(SETTLED)
            if (reason := self._settler.lost_reason(claim)) is not None:
                return reason
            changes = self._view.lock_changes.get(job)
            stale = seen is None or changes != seen or job not in self._view.jobs
            if stale and self._session().connected:  # while disconnected, session events decide
                try:
                    if (reason := await self._settler.why_lost(claim)) is not None:
                        return reason
                    seen = changes
                except BackendUnavailable:  # the connection broke meanwhile: session events say more
                    await anyio.sleep(0.05)
                    continue
            await change.wait()

    async def wait_for_completion(self, job_id: str) -> Outcome:
        """How the job ended, once it left the board. :raises BoardClosed: the board closed meanwhile."""
        if self._fleet is None:
            return await self._completion(job_id)
        return await self._fleet.pinned(job_id, lambda: self._completion(job_id))

    async def _completion(self, job_id: str) -> Outcome:
        while True:
            self._ensure_open()
            change = self._view.change(SETTLED)
            if await self._poster.locate(job_id) is None:
                return await self._reader.outcome(job_id)
            await change.wait()
