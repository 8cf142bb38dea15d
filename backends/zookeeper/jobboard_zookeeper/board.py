"""``zookeeper://``: a job board on ZooKeeper, through aiozk.

Layout and records are in :mod:`jobboard_zookeeper.layout`, the transactions in :mod:`jobboard_zookeeper.settle`,
the watched view in :mod:`jobboard_zookeeper.view`. Claims are ephemeral nodes of this board's session: if the
session expires every claim is gone, the board reports ``SESSION_EXPIRED`` and settling them raises ``ClaimLost``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping
from typing import Any

import anyio

from jobboard.backend import Prepared, Settle, SettleAction
from jobboard.board.codec import MalformedEntry
from jobboard.board.contract import JobBoard
from jobboard.board.events import Event, EventKind
from jobboard.errors import AlreadyClaimed, BackendUnavailable, NotClaimable
from jobboard.job import (
    Claim,
    Entity,
    Job,
    JobState,
    ListedJob,
    Outcome,
    TrashedJob,
    wanted,
)
from jobboard_zookeeper.batching import BatchingBoard, BatchPoster
from jobboard_zookeeper.collect import collect_forever
from jobboard_zookeeper.entities import Entities
from jobboard_zookeeper.fleetboard import FleetBoard
from jobboard_zookeeper.keep import KeepingBoard
from jobboard_zookeeper.layout import Paths, is_job_id
from jobboard_zookeeper.layout import sequence_of as sequence_in
from jobboard_zookeeper.linked import Stored
from jobboard_zookeeper.markers import Markers
from jobboard_zookeeper.ops import SessionEvent
from jobboard_zookeeper.options import parse_zookeeper_url
from jobboard_zookeeper.partitions import list_dir, open_layout
from jobboard_zookeeper.posting import Poster
from jobboard_zookeeper.reading import listed_jobs, lock_owners, outcome, trash_items
from jobboard_zookeeper.refusals import claim_refused, not_found
from jobboard_zookeeper.settle import Settler
from jobboard_zookeeper.view import SETTLED, WORK, CandidatePicker
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

READ_BATCH = 256
CONTENTION_MEMORY = 1.0
"""Seconds after a lost race during which claim_next starts spread out."""
SESSION_EVENTS = {SessionEvent.SUSPENDED: EventKind.SUSPENDED, SessionEvent.RECONNECTED: EventKind.RECONNECTED,
                  SessionEvent.EXPIRED: EventKind.SESSION_EXPIRED}


class ZooKeeperBackend(FleetBoard, KeepingBoard, BatchingBoard):
    """A job board stored under one ZooKeeper path; see the module docstring."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.options = parse_zookeeper_url(url)
        self.max_posting_bytes = self.options.max_posting_bytes
        self.default_max_attempts = self.options.max_attempts
        self.key_retention = self.options.key_retention
        self._paths = Paths(self.options.root)
        self._zk: ZooKeeper | None = None
        self.claim_conflicts = 0
        """Claim attempts in ``claim_next`` that lost a race (for benchmarks)."""
        self._last_lost_race = float("-inf")
        self._inflight: set[str] = set()
        """Jobs this board is trying to claim now: concurrent claim_next calls spread out."""

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        options = self.options
        self._zk = ZooKeeper(options.hosts, session_timeout=options.session_timeout,
                             connect_timeout=options.connect_timeout or options.session_timeout,
                             ping_interval=options.ping_interval, ping_timeout=options.ping_timeout,
                             auth=options.auth)
        await self._zk.start()
        try:
            self._paths = await open_layout(self._zk, options)  # flat, or partitioned (see .partitions)
            self._markers = Markers(self._zk, self._paths)
            self._settler = Settler(self._zk, self._paths, self._markers, max_posting_bytes=self.max_posting_bytes,
                                    max_request_bytes=self.options.max_request_bytes)
            self._settler.on_given_up = self._release_given_up
            self.view = self._make_view(self._zk)
            self._poster = Poster(self._zk, self._paths, self._markers, self.key_retention)
            self._batches = BatchPoster(self._zk, self._paths, self._markers, self._poster, options.max_request_bytes)
            self._entities = Entities(self._zk, self._paths)
            self._zk.add_session_listener(self._on_session_event)  # a blip while opening re-syncs
            await self.view.sync(report=False)
            await self._poster.open()
        except BaseException:
            await self._zk.close()
            raise
        self._open = True
        self._spawn(collect_forever(self._zk, self._paths, self._markers, self.key_retention))
        self._spawn(self.retain_forever())

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        self.view.notify()  # wake watch_claim / wait callers so that they see the board closed
        for task in list(self.services.tasks):
            task.cancel()
        assert self._zk is not None
        await self._markers.close()
        await self._zk.close()
        self.hub.close()

    @property
    def zk(self) -> ZooKeeper:
        self.ensure_open()
        assert self._zk is not None
        return self._zk

    def _publish(self, event: Event) -> None:
        self.hub.publish(event)

    def _on_session_event(self, event: str) -> None:
        if event in SESSION_EVENTS:
            self._publish(Event(SESSION_EVENTS[event], detail=f"ZooKeeper session {event}"))
        if event == SessionEvent.EXPIRED:
            self._settler.expire()
        self.view.notify()  # claim watchers re-evaluate on every session change
        if event in (SessionEvent.RECONNECTED, SessionEvent.CONNECTED):
            self._spawn(self._recover(new_session=event == SessionEvent.CONNECTED))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self.services.spawn(work)

    async def _recover(self, *, new_session: bool) -> None:
        try:
            if new_session:
                self._settler.lost.clear()  # their locks died with the old session
                self._settler.given_up.pending.clear()
                await self._entities.restore()
            else:
                await self._settler.release_orphans()
                await self._settler.given_up.release()
            await self.view.sync(report=True)
        except Exception:
            logger.exception("could not resynchronise %s after reconnecting", self.url)

    def _release_given_up(self) -> None:  # claims cancelled before their reply: released if they were made
        if self._open:
            self._spawn(self._settler.given_up.release())

    # -- posting -------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        return await self._poster.post(prepared.posting, prepared.raw)

    # -- reading ---------------------------------------------------------------

    async def _stored(self, job: str, *, claimable_only: bool = False) -> Stored | None:
        """The job's node in waiting/ or jobs/ (that order: see ``Poster.locate``).

        Malformed nodes are reported and skipped.
        """
        paths = [self._paths.job(job)] if claimable_only else [self._paths.waiting(job), self._paths.job(job)]
        for path in paths:
            try:
                stored = await self._settler.read(path)
            except MalformedEntry:
                self.report_malformed(job)
                self.view.skip_until(job, float("inf"))
                return None
            if stored is not None:
                self.view.names[job] = stored.posting.name
                return stored
        return None

    async def _listing(self, name: str) -> list[str]:
        return [child for child in await list_dir(self.zk, self._paths, name) if is_job_id(child)]

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.listing(only_unclaimed):
            yield listed.job

    def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        return listed_jobs(self.zk, self._paths, self._listing, self._stored, self.job_of, only_unclaimed=only_unclaimed)

    async def state(self, job_id: str) -> JobState:
        found = job_id
        paths = self._paths
        job_stat, lock_stat, waiting_stat, trash_stat = await asyncio.gather(
            self.zk.exists(paths.job(found)), self.zk.exists(paths.lock(found)),
            self.zk.exists(paths.waiting(found)), self.zk.exists(paths.trash(found)))
        if job_stat is not None:
            return JobState.CLAIMED if lock_stat is not None else JobState.UNCLAIMED
        if waiting_stat is not None:
            return JobState.WAITING
        return JobState.TRASHED if trash_stat is not None else JobState.COMPLETE

    async def owner(self, job_id: str) -> str | None:
        found = job_id
        return (await lock_owners(self.zk, self._paths, [found])).get(found)

    async def job_count(self) -> int:
        return len(await self._listing("jobs")) + len(await self._listing("waiting"))

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        for item in await trash_items(self.zk, self._paths, await self._listing("trash"), self.report_malformed):
            yield item

    # -- claiming ----------------------------------------------------------------

    async def claim(self, job_id: str, owner: str) -> Claim:
        found = job_id
        stored = await self._stored(found)
        if stored is None:
            raise not_found(found)
        if stored.path == self._paths.waiting(found):
            raise NotClaimable(f"job {found} is waiting for {len(stored.posting.waiting_on)} dependencies")
        outcome = await self._try_claim(found, stored, owner)
        if isinstance(outcome, Claim):
            return outcome
        if outcome in ("claimed", "changed") and await self.zk.exists(self._paths.lock(found)) is not None:
            raise AlreadyClaimed(f"job {found} is claimed by {await self.owner(found)}")
        raise claim_refused(found, outcome)

    async def _try_claim(self, job: str, stored: Stored, owner: str) -> Claim | str:
        posting = stored.posting
        if posting.not_before is not None and posting.not_before > time.time():
            return "delayed"
        if posting.max_attempts is not None and posting.attempts >= posting.max_attempts:
            if await self._settler.exhaust(job, stored):
                return "exhausted (moved to the trash)"
            return "changed"  # held by someone, or changed meanwhile
        return await self._settler.claim(job, stored, owner)

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        if self._must_join:  # a partitioned board's first claim (see .fleetboard)
            await self._join()
        picker = CandidatePicker(self.view.candidates(self._inflight, names))
        picker.contended = time.monotonic() - self._last_lost_race < CONTENTION_MEMORY
        while (job := picker.next(self.view.locks)) is not None:
            conflicts = self.claim_conflicts
            self._inflight.add(job)
            try:
                outcome = await self._claim_candidate(job, owner, names)
            finally:
                self._inflight.discard(job)
            if outcome is not None:
                return outcome
            picker.contended |= self.claim_conflicts > conflicts  # only a lost race spreads out
        return None if self._fleet is None else await self._steal(owner, names)

    async def _claim_candidate(self, job: str, owner: str, names: Collection[str] | None) -> Claim | None:
        stored = await self._candidate(job)
        if stored is None:
            return None
        if not wanted(stored.posting.name, names):
            return None
        outcome = await self._try_claim(job, stored, owner)
        if outcome == "delayed" and stored.posting.not_before is not None:
            self.view.skip_until(job, stored.posting.not_before)
        elif outcome in ("claimed", "changed", "gone"):  # lost races ("lost": a lost reply, not one)
            self.claim_conflicts += 1
            self._last_lost_race = time.monotonic()
        return outcome if isinstance(outcome, Claim) else None

    async def cancel(self, job_id: str, reason: str) -> None:
        found = job_id
        for _ in range(5):
            stored = await self._stored(found)
            if await self._settler.cancelled_before(found):
                return  # a first try, whose reply was lost, was applied
            if stored is None:
                raise not_found(found)
            if await self._settler.cancel(found, stored, reason) is None:
                return
        raise BackendUnavailable(f"cancelling job {found} kept conflicting with concurrent changes")

    async def settle(self, claim: Claim, settle: Settle) -> None:
        if settle.action is SettleAction.CONSUME:
            await self._settler.consume(claim, settle.result, settle.encoded_result)
        elif settle.action is SettleAction.ABANDON:
            not_before = time.time() + settle.retry_after if settle.retry_after else None
            await self._settler.abandon(claim, not_before, settle.error)
        else:
            await self._settler.trash(claim, settle.reason, settle.error)

    # -- waiting -------------------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        if self._must_join:
            await self._join()
        while True:
            self.ensure_open()  # aclose() wakes waiters: they must not wait on
            change = self.view.change(WORK)
            ready = await self._first_claimable(names)
            if ready is not None:
                return [ready]  # the first one found: callers claim, they need not read on
            delay = self._wake_after(self.view.next_delay_end())
            with anyio.move_on_after(float("inf") if delay is None else delay):
                await change.wait()

    async def _first_claimable(self, names: Collection[str] | None) -> Job | None:
        """The first claimable job in board order; delayed ones are remembered and passed over."""
        for job in itertools.islice(self.view.candidates(set(), names), READ_BATCH):
            stored = await self._stored(job, claimable_only=True)
            if stored is None or not wanted(stored.posting.name, names):
                continue
            not_before = stored.posting.not_before
            if not_before is not None and not_before > time.time():
                self.view.skip_until(job, not_before)
                continue
            return stored.posting.to_job(job, sequence_in(job))
        return None if self._fleet is None else await self._foreign_claimable(names)

    async def _claim_watch(self, claim: Claim) -> str:
        job, seen = claim.job.id, None
        while True:
            if not self._open:
                return "board closed"
            change = self.view.change(SETTLED)
            if (reason := self._settler.lost_reason(claim)) is not None:
                return reason
            changes = self.view.lock_changes.get(job)
            stale = seen is None or changes != seen or job not in self.view.jobs
            if stale and self.zk.connected:  # while disconnected, session events decide
                try:
                    if (reason := await self._settler.why_lost(claim)) is not None:
                        return reason
                    seen = changes
                except BackendUnavailable:  # the connection broke meanwhile: session events say more
                    await anyio.sleep(0.05)
                    continue
            await change.wait()

    async def _completion(self, found: str) -> Outcome:
        while True:
            self.ensure_open()
            change = self.view.change(SETTLED)
            if await self._poster.locate(found) is None:
                return await outcome(self.zk, self._paths, found)
            await change.wait()

    # -- entities ------------------------------------------------------------------

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self._entities.register(name, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self._entities.unregister(name)

    async def entities(self) -> list[Entity]:
        return await self._entities.listing()


class ZooKeeperBoard(JobBoard):
    """A :class:`~jobboard.board.contract.JobBoard` over a :class:`ZooKeeperBackend`: ``ZooKeeperBoard(url)``."""

    backend: ZooKeeperBackend

    def __init__(self, url: str) -> None:
        super().__init__(ZooKeeperBackend(url))
