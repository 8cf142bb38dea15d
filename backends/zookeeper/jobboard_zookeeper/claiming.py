"""Claiming on ZooKeeper: ``claim``, ``claim_next`` and what it passes over (:class:`Claimer`).

``claim_next`` takes the candidates from the live view in board order (priority, then age),
reads them ahead several at a time (:class:`ReadAhead`: one ``multiRead`` serves several
claims), and claims the first it can, not held back by flow control (:mod:`jobboard_zookeeper.flow`:
a group at its concurrency or rate, or a sequence's jobs but its head, are passed over for the rest of
the call: :class:`~jobboard_zookeeper.flow.Skips`), with the claim multi of
:meth:`Settler.claim <jobboard_zookeeper.settle.Settler.claim>` (``set_data(job, attempts + 1,
version)`` + ``create(lock, ephemeral)``: atomic; the job's new version is the claim's
generation). After a lost race it picks at random among the next few candidates for a while
(:class:`~jobboard_zookeeper.view.CandidatePicker`), so claimers on other boards spread out
(not while a limit or pause exists: flow control keeps board order, as on every backend). A
member of a partitioned board's fleet that finds nothing claimable in its own partitions
steals from the others (:mod:`jobboard_zookeeper.fleet`).
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Collection

from jobboard.board.codec import MalformedEntry, decode_posting
from jobboard.errors import AlreadyClaimed, HeldBack, NotClaimable
from jobboard.job import Claim, wanted
from jobboard_zookeeper.fleet import Fleet
from jobboard_zookeeper.flow import Flow, Skips, group_of
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.reading import Reader, Session, Stored
from jobboard_zookeeper.refusals import claim_refused, not_found
from jobboard_zookeeper.settle import Settler
from jobboard_zookeeper.view import BoardView, CandidatePicker

READ_AHEAD = 16
"""Claim candidates read in one request."""
MISSING = "missing"
CONTENTION_MEMORY = 1.0
"""Seconds after a lost race during which claim_next starts spread out."""
FLOW_RETRIES = 8
"""Claim attempts of one job whose flow-control nodes changed meanwhile (each reads its gate again)."""


class ReadAhead:
    """Claim candidates read ahead, several in one ``multiRead``, for one board's claimers.

    The cache is the view's ``prefetched``: an entry goes when its job's node changes.
    """

    def __init__(self, session: Session, paths: Paths, view: BoardView, reader: Reader,
                 inflight: set[str], flow: Flow) -> None:
        self._session, self._paths, self._view, self._reader, self._flow = session, paths, view, reader, flow
        self._inflight = inflight
        """Jobs the board's claimers are claiming now (not read ahead again)."""
        self._reading: dict[str, asyncio.Future[None]] = {}
        """Jobs being read ahead now, and the read's end."""

    async def candidate(self, job: str) -> Stored | None:
        """A claim candidate as read: from the last read-ahead, or read now together with the
        next candidates (one ``multiRead`` of up to :data:`READ_AHEAD` jobs serves several claims).

        One read just before a change can still be stale, which only makes the claim's versioned
        multi fail (as a lost race). A job that is delayed, out of attempts or malformed is read
        again, so those decisions use a fresh read.
        """
        cache = self._view.prefetched
        if job in self._reading:
            await asyncio.shield(self._reading[job])  # another claimer's read ahead has it
        elif job not in cache:
            await self._read_ahead(job)
        found = cache.pop(job, MISSING)
        if found is None:
            return None
        if isinstance(found, tuple):
            raw, stat = found
            try:
                posting = decode_posting(raw)
            except MalformedEntry:
                posting = None
            if posting is not None and not (
                    posting.not_before is not None and posting.not_before > time.time()
                    or posting.max_attempts is not None and posting.attempts >= posting.max_attempts):
                self._view.names[job] = posting.name
                return Stored(self._paths.job(job), raw, posting, stat.version, stat.num_children)
        return await self._reader.stored(job, claimable_only=True)

    async def _read_ahead(self, job: str) -> None:
        cache, reading = self._view.prefetched, self._reading
        batch = [job]
        for other in self._view.candidates(self._inflight | {job}):
            if len(batch) >= READ_AHEAD:
                break
            if other not in cache and other not in reading:
                batch.append(other)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reading.update(dict.fromkeys(batch, done))
        try:
            found = await self._session().get_many([self._paths.job(each) for each in batch])
            if len(cache) > 8 * READ_AHEAD:
                cache.clear()  # entries of jobs other boards took: keep the cache small
            learn = bool(self._flow.state.limits)  # each job's group, once read: held ones are passed over unread
            for each, entry in zip(batch, found, strict=True):
                if each in self._view.jobs:
                    cache[each] = entry
                    if learn and entry is not None and each not in self._flow.groups:
                        self._flow.remember(each, group_of(entry[0]))
        finally:
            for each in batch:
                reading.pop(each, None)
            done.set_result(None)


class Claimer:
    """``claim`` and ``claim_next`` for one board (see the module docstring)."""

    def __init__(self, session: Session, paths: Paths, view: BoardView, settler: Settler, reader: Reader,
                 fleet: Fleet | None, flow: Flow) -> None:
        self._session, self._paths, self._view, self._flow = session, paths, view, flow
        self._settler, self._reader, self._fleet = settler, reader, fleet
        self._inflight: set[str] = set()
        """Jobs this board is trying to claim now: concurrent claim_next calls spread out."""
        self._ahead = ReadAhead(session, paths, view, reader, self._inflight, flow)
        self._last_lost_race = float("-inf")
        self.claim_conflicts = 0
        """Claim attempts in ``claim_next`` that lost a race (for benchmarks)."""
        self.steals = 0
        """Jobs claimed from partitions of other members (for benchmarks)."""

    async def claim(self, job_id: str, owner: str) -> Claim:
        """:raises JobNotFound, NotClaimable, AlreadyClaimed, BackendUnavailable: as the contract says."""
        stored = await self._reader.stored(job_id)
        if stored is None:
            raise not_found(job_id)
        if stored.path == self._paths.waiting(job_id):
            raise NotClaimable(f"job {job_id} is waiting for {len(stored.posting.waiting_on)} dependencies")
        outcome = await self._try_claim(job_id, stored, owner)
        if isinstance(outcome, Claim):
            return outcome
        if isinstance(outcome, HeldBack):
            raise outcome
        if outcome in ("claimed", "changed") and await self._session().exists(self._paths.lock(job_id)) is not None:
            raise AlreadyClaimed(f"job {job_id} is claimed by {await self._reader.owner(job_id)}")
        raise claim_refused(job_id, outcome)

    async def _try_claim(self, job: str, stored: Stored, owner: str,
                         skips: Skips | None = None) -> Claim | str | HeldBack:
        """Claim a job as read, or say why not (``delayed``, ``changed`` ..., or flow control's refusal)."""
        posting = stored.posting
        if posting.not_before is not None and posting.not_before > time.time():
            return "delayed"
        if posting.max_attempts is not None and posting.attempts >= posting.max_attempts:
            if await self._settler.exhaust(job, stored):
                return "exhausted (moved to the trash)"
            return "changed"  # held by someone, or changed meanwhile
        for _ in range(FLOW_RETRIES):  # a flow-control node changed meanwhile: read the gate again
            gate = await self._flow.gate(job, stored.posting, owner, skips)
            if isinstance(gate, HeldBack):
                return gate
            outcome = await self._settler.claim(job, stored, owner, gate)
            if outcome != "flow":
                return outcome
            self._flow.stale()
        return "changed"

    async def claim_next(self, owner: str, names: Collection[str] | None, whys: set[str] | None = None) -> Claim | None:
        """The best claimable job this board sees, claimed; stolen from the other partitions when a
        fleet member's own have none; ``None`` when there is none anywhere. ``whys`` (if given) gathers why
        the jobs it passed over were held back (each met in board order before the one it took)."""
        skips = Skips(self._flow)  # what flow control holds back, judged once per group in this call
        claim = await self._claim_next(owner, names, skips)
        if whys is not None:
            whys |= skips.whys
        return claim

    async def _claim_next(self, owner: str, names: Collection[str] | None, skips: Skips) -> Claim | None:
        fleet = self._fleet  # None: a flat board
        if fleet is not None and fleet.must_join:  # a partitioned board's first claim (see .fleet)
            await fleet.join()
        state = await self._flow.refresh()
        if fleet is not None and state.used:
            return await self._claim_in_board_order(fleet, owner, names, skips)
        spread = not state.active  # flow control keeps board order: no random pick after a lost race
        picker = CandidatePicker(self._view.candidates(self._inflight, names))
        picker.contended = spread and time.monotonic() - self._last_lost_race < CONTENTION_MEMORY
        while (job := picker.next(self._view.locks)) is not None:
            conflicts = self.claim_conflicts
            self._inflight.add(job)
            try:
                outcome = await self._claim_candidate(job, owner, names, skips)
            finally:
                self._inflight.discard(job)
            if outcome is not None:
                return outcome
            picker.contended |= spread and self.claim_conflicts > conflicts  # only a lost race spreads out
        return await self._steal(fleet, owner, names, skips) if fleet is not None else None

    async def _claim_candidate(self, job: str, owner: str, names: Collection[str] | None,
                               skips: Skips) -> Claim | None:
        if skips.passes_over_unread(job):  # a held group's job, its group known: not read again
            return None
        stored = await self._ahead.candidate(job)
        if stored is None:
            return None
        if not wanted(stored.posting.name, names) or skips.passes_over(job, stored.posting):
            return None
        outcome = await self._try_claim(job, stored, owner, skips)
        if isinstance(outcome, HeldBack):
            skips.note(stored.posting.group, outcome)
            return None
        if outcome == "delayed" and stored.posting.not_before is not None:
            self._view.skip_until(job, stored.posting.not_before)
        elif outcome in ("claimed", "changed", "gone"):  # lost races ("lost": a lost reply, not one)
            self.claim_conflicts += 1
            self._last_lost_race = time.monotonic()
        return outcome if isinstance(outcome, Claim) else None

    async def _steal(self, fleet: Fleet, owner: str, names: Collection[str] | None,
                     skips: Skips) -> Claim | None:
        """Claim the best unclaimed job of the partitions this board does not watch, if any."""
        for job in await fleet.unclaimed():
            if (claim := await self._claim_foreign(fleet, job, owner, names, skips)) is not None:
                return claim
        return None

    async def _claim_in_board_order(self, fleet: Fleet, owner: str, names: Collection[str] | None,
                                    skips: Skips) -> Claim | None:
        """On a partitioned board where flow control was ever set: the best job of every partition, this
        member's and the others' merged in board order, so that the order flow control keeps (and a resumed
        name's) is the board's (one listing of the other partitions per call, as a steal)."""
        own = self._view.candidates(self._inflight, names)
        for job in heapq.merge(own, await fleet.unclaimed()):
            if job in self._inflight:
                continue
            if self._view.watches(job) and job in self._view.jobs:
                self._inflight.add(job)
                try:
                    claim = await self._claim_candidate(job, owner, names, skips)
                finally:
                    self._inflight.discard(job)
            else:
                claim = await self._claim_foreign(fleet, job, owner, names, skips)
            if claim is not None:
                return claim
        return None

    async def _claim_foreign(self, fleet: Fleet, job: str, owner: str, names: Collection[str] | None,
                             skips: Skips) -> Claim | None:
        """Claim ``job`` of a partition this board does not watch (read first), if it can."""
        if job in self._inflight:
            return None
        self._inflight.add(job)
        try:
            found = await self._reader.readable(job, names)
            if found is None or skips.passes_over(job, found.posting):
                return None
            outcome = await self._try_claim(job, found, owner, skips)
        finally:
            self._inflight.discard(job)
        if isinstance(outcome, HeldBack):
            skips.note(found.posting.group, outcome)
        if isinstance(outcome, Claim):
            self.steals += 1
            fleet.found()
            return outcome
        if outcome == "delayed" and found.posting.not_before is not None:
            self._view.skip_until(job, found.posting.not_before)
        return None
