"""``zookeeper://``: a job board on ZooKeeper, through aiozk.

:class:`ZooKeeperBackend` opens the session and the layout, builds its collaborators and hands
each call to the one that does it:

* posting: :class:`~.batching.Grouper` (the unlinked posts of one loop turn, in one multi),
  :class:`~.posting.Poster` (a linked post; ids), :class:`~.batching.BatchPoster` (``post_many``);
* claiming: :class:`~.claiming.Claimer` (``claim``, ``claim_next``, the read-ahead, stealing);
* settling: :class:`~.settle.Settler` (the claim and settle transactions);
* waiting: :class:`~.watching.Watcher` (``wait``, ``watch_claim``, ``wait_for_completion``);
* reading: :class:`~.reading.Reader` (``get``, listings, state, owner, the trash);
* cancelling: :class:`~.cancel.Canceller`;
* keeping: :class:`~.keep.Keeper` (progress, purge, requeue); retention and collection
  run in the background (:mod:`.retention`, :mod:`.collect`);
* the fleet of a partitioned board: :class:`~.fleet.Fleet` (joining, pins, the other partitions;
  a flat board has none: decided at open);
* entities: :class:`~.entities.Entities`;
* flow control: :class:`~.flow.Flow` (the cached limits and pauses, each claim's gate) and
  :class:`~.flow_admin.FlowAdmin` (what is stored, listed).

They share the live view (:mod:`.view`), the paths (:mod:`.layout`, :mod:`.partitions`) and the
write markers (:mod:`.markers`); only :mod:`.zk` (with its wire modules) talks to aiozk. Claims are
ephemeral nodes of this board's session: if the session expires every claim is gone, the board
reports ``SESSION_EXPIRED`` and settling them raises ``ClaimLost``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from jobboard.backend import Backend, Prepared, Settle, SettleAction
from jobboard.board.contract import JobBoard
from jobboard.board.events import Event, EventKind
from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.job import Claim, Entity, Job, JobState, ListedJob, Outcome, Progress, TrashedJob
from jobboard_zookeeper.batching import BatchPoster, Grouper
from jobboard_zookeeper.cancel import Canceller
from jobboard_zookeeper.claiming import Claimer
from jobboard_zookeeper.collect import collect_forever
from jobboard_zookeeper.entities import Entities
from jobboard_zookeeper.fleet import Fleet, make_view
from jobboard_zookeeper.flow import Flow
from jobboard_zookeeper.flow_admin import FlowAdmin
from jobboard_zookeeper.keep import Keeper
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.markers import Markers
from jobboard_zookeeper.ops import SessionEvent
from jobboard_zookeeper.options import parse_zookeeper_url
from jobboard_zookeeper.partitions import open_layout
from jobboard_zookeeper.posting import Poster
from jobboard_zookeeper.reading import Reader
from jobboard_zookeeper.retention import retain_forever
from jobboard_zookeeper.settle import Settler
from jobboard_zookeeper.view import WORK, BoardView
from jobboard_zookeeper.watching import Watcher
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

SESSION_EVENTS = {SessionEvent.SUSPENDED: EventKind.SUSPENDED, SessionEvent.RECONNECTED: EventKind.RECONNECTED,
                  SessionEvent.EXPIRED: EventKind.SESSION_EXPIRED}


class ZooKeeperBackend(Backend):
    """A job board stored under one ZooKeeper path; see the module docstring."""

    view: BoardView
    _markers: Markers
    _settler: Settler
    _poster: Poster
    _batches: BatchPoster
    _grouper: Grouper
    _reader: Reader
    _fleet: Fleet | None
    _claimer: Claimer
    _watcher: Watcher
    _keeper: Keeper
    _canceller: Canceller
    _entities: Entities
    _flow: Flow
    _flow_admin: FlowAdmin

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.options = parse_zookeeper_url(url)
        self.use_options(self.options)
        self._paths = Paths(self.options.root)
        self._zk: ZooKeeper | None = None

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        options = self.options
        self._zk = zk = ZooKeeper(options.hosts, session_timeout=options.session_timeout,
                                  connect_timeout=options.connect_timeout or options.session_timeout,
                                  ping_interval=options.ping_interval, ping_timeout=options.ping_timeout,
                                  auth=options.auth)
        await zk.start()
        try:
            self._paths = await open_layout(zk, options)  # flat, or partitioned (see .partitions)
            self._assemble(zk, self._paths)
            zk.add_session_listener(self._on_session_event)  # a blip while opening re-syncs
            await self.view.sync(report=False)
            await self._flow.open(zk)
            await self._poster.open()
        except BaseException:
            await zk.close()
            raise
        self._open = True
        self.services.spawn(collect_forever(zk, self._paths, self._markers, self.key_retention))
        self.services.spawn(retain_forever(zk, self._paths, self.result_ttl, self.trash_ttl))

    def _assemble(self, zk: ZooKeeper, paths: Paths) -> None:
        """Build the collaborators over the open session."""
        options, session = self.options, self.session
        self._markers = markers = Markers(zk, paths)
        self._settler = settler = Settler(zk, paths, markers, max_posting_bytes=self.max_posting_bytes,
                                          max_request_bytes=options.max_request_bytes)
        settler.on_given_up = self._release_given_up
        self.view, self._fleet = view, fleet = make_view(zk, paths, self.hub.publish, self.services.spawn, session)
        self._poster = poster = Poster(zk, paths, markers, self.key_retention)
        self._batches = batches = BatchPoster(zk, paths, markers, poster, options.max_request_bytes)
        self._grouper = batches.grouper
        self._reader = reader = Reader(session, zk, paths, view, self.report_malformed)
        self._flow = flow = Flow(session, paths, lambda: view.notify(WORK))
        settler.permit_returned = flow.returned
        self._flow_admin = FlowAdmin(session, paths, flow, reader)
        self._claimer = Claimer(session, paths, view, settler, reader, fleet, flow)
        self._watcher = Watcher(session, view, settler, poster, reader, fleet, flow, self.ensure_open)
        self._keeper = Keeper(session, paths)
        self._canceller = Canceller(zk, paths, markers, settler.linked, reader, options.max_request_bytes)
        self._entities = Entities(zk, paths)

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

    def session(self) -> ZooKeeper:
        """The open session. :raises BoardClosed: the board is not open."""
        self.ensure_open()
        assert self._zk is not None
        return self._zk

    @property
    def zk(self) -> ZooKeeper:
        """The open session. :raises BoardClosed: the board is not open."""
        return self.session()

    @property
    def claim_conflicts(self) -> int:
        """Claim attempts in ``claim_next`` that lost a race (for benchmarks)."""
        return self._claimer.claim_conflicts

    @property
    def steals(self) -> int:
        """Jobs claimed from partitions of other members (for benchmarks)."""
        return self._claimer.steals

    def _on_session_event(self, event: str) -> None:
        if event in SESSION_EVENTS:
            self.hub.publish(Event(SESSION_EVENTS[event], detail=f"ZooKeeper session {event}"))
        if event == SessionEvent.EXPIRED:
            self._settler.expire()
        self.view.notify()  # claim watchers re-evaluate on every session change
        if event in (SessionEvent.RECONNECTED, SessionEvent.CONNECTED):
            self.services.spawn(self._recover(new_session=event == SessionEvent.CONNECTED))

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
            await self._flow.open(self.session())  # the watch again, and what changed meanwhile
        except Exception:
            logger.exception("could not resynchronise %s after reconnecting", self.url)

    def _release_given_up(self) -> None:  # claims cancelled before their reply: released if they were made
        if self._open:
            self.services.spawn(self._settler.given_up.release())

    # -- writes ----------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        """An unlinked post is written with the others of its loop turn (:class:`~.batching.Grouper`);
        a linked one alone, its dependencies located first (:meth:`~.posting.Poster.post_one`)."""
        if prepared.posting.depends_on:
            return await self._poster.post_one(prepared.posting, prepared.raw)
        return await self._grouper.post(prepared.posting, prepared.raw)

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        return await self._batches.post(batch)

    async def claim(self, job_id: str, owner: str) -> Claim:
        return await self._claimer.claim(job_id, owner)

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        whys: set[str] = set()
        claim = await self._claimer.claim_next(owner, names, whys)
        if whys:
            self.passed_over(whys)
        return claim

    @property
    def reports_held_back(self) -> bool:
        return True

    async def settle(self, claim: Claim, settle: Settle) -> None:
        if settle.action is SettleAction.CONSUME:
            await self._settler.consume(claim, settle.result, settle.encoded_result)
        elif settle.action is SettleAction.ABANDON:
            not_before = time.time() + settle.retry_after if settle.retry_after else None
            await self._settler.abandon(claim, not_before, settle.error)
        else:
            await self._settler.trash(claim, settle.reason, settle.error)

    async def release(self, claim: Claim) -> None:  # its attempt uncounted
        await self._settler.give_back(claim)

    async def claim_lost(self, claim: Claim) -> str | None:
        return self._settler.lost_reason(claim) or await self._settler.why_lost(claim)

    async def watch_claim(self, claim: Claim) -> str:
        return await self._watcher.watch_claim(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        await self._canceller.cancel(job_id, reason)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self._keeper.report_progress(claim, progress)

    async def purge(self, older_than: float) -> int:
        return await self._keeper.purge(older_than)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        return await self._keeper.requeue(job_id, reset_attempts)

    # -- reads -------------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        return await self._reader.get(job_id)

    def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        return self._reader.iterjobs(only_unclaimed)

    def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        return self._reader.listing(only_unclaimed)

    async def state(self, job_id: str) -> JobState:
        return await self._reader.state(job_id)

    async def owner(self, job_id: str) -> str | None:
        return await self._reader.owner(job_id)

    async def job_count(self) -> int:
        return await self._reader.job_count()

    def trashed(self) -> AsyncIterator[TrashedJob]:
        return self._reader.trashed()

    def could_be_job_id(self, job_id: str) -> bool:
        return Reader.could_be_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        return await self._reader.never_posted(job_id)

    # -- waiting and entities ------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self._watcher.wait(names)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self._watcher.wait_for_completion(job_id)

    def observed(self) -> None:
        if self._fleet is not None:  # a flat board watches everything anyway
            self._fleet.observe()

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self._entities.register(name, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self._entities.unregister(name)

    async def entities(self) -> list[Entity]:
        return await self._entities.listing()

    # -- flow control (jobboard_zookeeper.flow) ----------------------------------------

    async def set_limit(self, limit: LimitSpec) -> None:
        await self._flow_admin.set_limit(limit)

    async def clear_limit(self, group: str) -> bool:
        return await self._flow_admin.clear_limit(group)

    async def limits(self) -> list[GroupLimit]:
        return await self._flow_admin.limits()

    async def pause(self, name: str | None) -> None:
        await self._flow_admin.pause(name)

    async def resume(self, name: str | None) -> None:
        await self._flow_admin.resume(name)

    async def paused(self) -> Paused:
        return await self._flow_admin.paused()


class ZooKeeperBoard(JobBoard):
    """A :class:`~jobboard.board.contract.JobBoard` over a :class:`ZooKeeperBackend`: ``ZooKeeperBoard(url)``."""

    backend: ZooKeeperBackend

    def __init__(self, url: str) -> None:
        super().__init__(ZooKeeperBackend(url))
