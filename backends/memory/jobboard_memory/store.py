"""The state of one ``memory://`` board, shared by every board opened on its name.

Every method here is synchronous and never awaits, so on one event loop each
is atomic. Entries are kept as encoded postings and decoded on admission, so
the memory backend goes through the same codec (and the same malformed-entry
path) as a remote one.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace

from jobboard.board.checks import flat_details
from jobboard.board.codec import MalformedEntry, Posting, decode_posting, decode_value
from jobboard.board.events import Event, EventKind
from jobboard.errors import (
    AlreadyClaimed,
    ClaimLost,
    DependencyMissing,
    JobNotFound,
    NotClaimable,
    NotOwner,
)
from jobboard.job import Claim, Job, JobState, Outcome, Progress, TrashedJob, wanted
from jobboard_memory.flow import Flow, Item

MAX_ATTEMPTS_REASON = "max attempts exceeded"


@dataclass(eq=False, slots=True)
class Entry:
    """One job on the board, with its claim and link state."""

    job_id: str
    sequence: int
    posting: Posting
    owner: str | None = None
    holder: object = None
    """The board whose claim this is (released when that board closes)."""
    generation: int = 0
    waiting_on: set[str] = field(default_factory=set)
    results: dict[str, bytes] = field(default_factory=dict)
    dependents: list[str] = field(default_factory=list)
    progress: tuple[int, Progress] | None = None
    """The last progress reported, with the generation of the claim that reported it."""

    def job(self) -> Job:
        job = self.posting.to_job(self.job_id, self.sequence)
        if self.progress is None or self.owner is None or self.progress[0] != self.generation:
            return job
        return replace(job, progress=self.progress[1])

    def state(self) -> JobState:
        if self.waiting_on:
            return JobState.WAITING
        return JobState.CLAIMED if self.owner is not None else JobState.UNCLAIMED

    def sort_key(self) -> tuple[int, int]:
        return (self.posting.priority.rank, self.sequence)


@dataclass
class KeyRecord:
    """The job an idempotency key finds, and the job as settled (``None``: on the board)."""

    job_id: str
    settled: Job | None = None


class Store:
    """Jobs, trash, kept outcomes and entities of one named memory board."""

    def __init__(self, publish: Callable[[Event], None]) -> None:
        self.jobs: dict[str, Entry] = {}
        self.malformed: dict[str, bytes] = {}
        self.trash: dict[str, TrashedJob] = {}
        self.kept_results: dict[str, bytes] = {}
        self.kept_at: dict[str, tuple[float, float | None]] = {}
        """When each kept result was stored (wall clock) and its job's own ``result_ttl``."""
        self.trashed_entries: dict[str, Entry] = {}
        """The entries behind ``trash`` (for ``requeue``)."""
        self._ready: list[tuple[int, int, str]] = []
        self.flow = Flow(self._ready)
        """Limits, pauses and permits (consulted by the claim paths only while one exists)."""
        self.last_sequence = 0
        """The sequence of the last id given (ids past it were never posted)."""
        self._publish = publish
        self.keys: dict[str, KeyRecord] = {}
        self._settled_keys: dict[str, float] = {}
        """Keys of settled jobs and when they were settled (monotonic), oldest first."""

    # -- posting -------------------------------------------------------------

    def keyed(self, key: str | None, retention: float) -> Job | None:
        """The job an idempotency key still finds (on the board, or settled within ``retention``).

        Keys settled longer ago are dropped here, oldest first, so they never pile up.
        """
        now = time.monotonic()
        while self._settled_keys:
            oldest, settled_at = next(iter(self._settled_keys.items()))
            if now - settled_at < retention:
                break
            del self._settled_keys[oldest], self.keys[oldest]
        record = self.keys.get(key) if key is not None else None
        if record is None:
            return None
        return self.jobs[record.job_id].job() if record.settled is None else record.settled

    def admit(self, raw: bytes, posting: Posting | None = None) -> Job:
        """Add an encoded posting; an undecodable one is kept aside as malformed. ``posting``: what ``raw``
        encodes, kept as it is when its details are flat (its own copy of scalars: decoding ``raw`` would
        make an equal one), else ``raw`` is decoded, as a remote backend reads its entries.

        :raises InvalidJob: a dependency is not on the board (nothing is added).
        :raises MalformedEntry: ``raw`` is not a posting (it is kept in ``malformed``).
        """
        self.last_sequence += 1
        sequence = self.last_sequence
        job_id = "job-%010d" % sequence  # noqa: UP031 - a third cheaper than the f-string's format spec
        if posting is None or not flat_details(posting.details):
            try:
                posting = decode_posting(raw)
            except MalformedEntry:
                self.malformed[job_id] = raw
                raise
        missing = [dep for dep in posting.depends_on if dep not in self.jobs]
        if missing:
            raise DependencyMissing.of(posting.name, ", ".join(missing))
        entry = Entry(job_id, sequence, posting, waiting_on=set(posting.depends_on))
        self.jobs[job_id] = entry
        if posting.group is not None:
            self.flow.joined(entry)
        for dep in posting.depends_on:
            self.jobs[dep].dependents.append(job_id)
        self._make_ready(entry)
        if posting.key is not None:
            self.keys[posting.key] = KeyRecord(job_id)
        self._publish(Event(EventKind.POSTED, job_id, posting.name))
        return entry.job()

    def _settled(self, entry: Entry) -> None:
        """Keep the job a key finds after it left the board (from now on)."""
        key = entry.posting.key
        if key is not None:
            self.keys[key] = KeyRecord(entry.job_id, entry.job())
            self._settled_keys.pop(key, None)
            self._settled_keys[key] = time.monotonic()  # settle order: the oldest first

    def _make_ready(self, entry: Entry) -> None:
        if not entry.waiting_on and entry.owner is None:
            heapq.heappush(self._ready, (*entry.sort_key(), entry.job_id))

    # -- reading -------------------------------------------------------------

    def entry(self, job_id: str) -> Entry:
        """:raises JobNotFound: the job is not on the board."""
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(f"job {job_id} is not on the board") from None

    def ordered(self) -> list[Entry]:
        return sorted(self.jobs.values(), key=Entry.sort_key)

    def state(self, job_id: str) -> JobState:
        entry = self.jobs.get(job_id)
        if entry is not None:
            return entry.state()
        return JobState.TRASHED if job_id in self.trash else JobState.COMPLETE

    def outcome(self, job_id: str) -> Outcome | None:
        """How the job ended, or ``None`` while it is on the board."""
        if job_id in self.jobs:
            return None
        if job_id in self.trash:
            return Outcome(job_id, JobState.TRASHED, reason=self.trash[job_id].reason)
        raw = self.kept_results.get(job_id)
        return Outcome(job_id, JobState.COMPLETE, result=None if raw is None else decode_value(raw))

    def claimable(self, now: float, names: Collection[str] | None) -> list[Job]:
        flow = self.flow
        return [e.job() for e in self.ordered() if e.state() is JobState.UNCLAIMED
                and not _delayed(e, now) and wanted(e.posting.name, names)
                and not (flow.active and flow.refusal(e) is not None)]

    def next_wakeup(self, now: float) -> float | None:
        """Seconds until the earliest delayed job becomes claimable, or the next rate permit is due, if any."""
        delays = [e.posting.not_before - now for e in self.jobs.values()
                  if e.posting.not_before is not None and e.state() is JobState.UNCLAIMED]
        if self.flow.active and (permit := self.flow.next_permit()) is not None:
            delays.append(permit)
        return max(0.0, min(delays)) if delays else None

    # -- claiming ------------------------------------------------------------

    def claim(self, job_id: str, owner: str, holder: object, now: float) -> Claim:
        """Claim one job (see ``JobBoard.claim`` for the rules and errors)."""
        entry = self.entry(job_id)
        if entry.waiting_on:
            raise NotClaimable(f"job {job_id} is waiting for {len(entry.waiting_on)} dependencies")
        if entry.owner is not None:
            raise AlreadyClaimed(f"job {job_id} is claimed by {entry.owner}")
        if entry.posting.not_before is not None and entry.posting.not_before > now:
            raise NotClaimable(f"job {job_id} is delayed for {entry.posting.not_before - now:.1f}s")
        if self.flow.active and (held := self.flow.refusal(entry)) is not None:
            raise held
        limit = entry.posting.max_attempts
        if limit is not None and entry.posting.attempts >= limit:
            self.move_to_trash(entry, f"{MAX_ATTEMPTS_REASON} ({limit})", now)
            raise JobNotFound(f"job {job_id} used its {limit} attempts and was moved to the trash")
        entry.posting = entry.posting.claimed()
        entry.owner, entry.holder = owner, holder
        entry.generation += 1
        if entry.posting.group is not None:
            self.flow.claimed(entry)
        self._publish(Event(EventKind.CLAIMED, job_id, owner))
        results = tuple(decode_value(entry.results[dep]) for dep in entry.posting.depends_on)
        return Claim(entry.job(), owner, entry.generation, results)

    def claim_next(
        self, owner: str, holder: object, now: float, names: Collection[str] | None, whys: set[str] | None = None,
    ) -> Claim | None:
        """Claim the best claimable job, skipping stale heap items (and parking held-back ones); ``whys`` (given
        on a gated board) gathers why the jobs it passed over, parked now or before, are held back."""
        flow = self.flow
        if flow.active:
            if flow.paused_board:
                self._paused(now, names, whys)
                return None
            flow.unpark_due()
        delayed: list[tuple[int, int, str]] = []
        try:
            while self._ready:
                item = heapq.heappop(self._ready)
                entry = self.jobs.get(item[2])
                if entry is None or entry.state() is not JobState.UNCLAIMED:
                    continue
                if _delayed(entry, now) or not wanted(entry.posting.name, names):
                    delayed.append(item)
                    continue
                if flow.active and (why := flow.park(entry, item)) is not None:
                    if whys is not None:
                        whys.add(why)
                    continue
                try:
                    claim = self.claim(entry.job_id, owner, holder, now)
                except JobNotFound:
                    continue
                self._passed(item, names, whys)
                return claim
            self._passed(None, names, whys)
            return None
        finally:
            for item in delayed:
                heapq.heappush(self._ready, item)

    def _paused(self, now: float, names: Collection[str] | None, whys: set[str] | None) -> None:
        """The whole board paused: its claimable jobs are all held back (``"paused"`` if it has one)."""
        if whys is not None and any(e.state() is JobState.UNCLAIMED and not _delayed(e, now)
                                    and wanted(e.posting.name, names) for e in self.jobs.values()):
            whys.add("paused")

    def _passed(self, before: Item | None, names: Collection[str] | None, whys: set[str] | None) -> None:
        """Add to ``whys`` why the jobs parked earlier, better than ``before`` (any: ``None``), are held back."""
        if whys is not None and self.flow.active:
            whys |= self.flow.parked_whys(before, lambda name: wanted(name, names), self._waiting)

    def _waiting(self, job_id: str) -> bool:
        entry = self.jobs.get(job_id)
        return entry is not None and entry.state() is JobState.UNCLAIMED

    # -- settling ------------------------------------------------------------

    def lost_because(self, claim: Claim) -> str | None:
        """Why ``claim`` is not current any more, or ``None`` while it is."""
        entry = self.jobs.get(claim.job.id)
        if entry is None:
            return "trashed" if claim.job.id in self.trash else "consumed"
        if entry.generation != claim.generation:
            return "claimed again" if entry.owner is not None else "released"
        return "released" if entry.owner is None else None

    def current(self, claim: Claim) -> Entry:
        """The claimed entry, if ``claim`` is its current claim.

        :raises ClaimLost: settled, released or claimed again since.
        :raises NotOwner: right generation, different owner.
        """
        entry = self.jobs.get(claim.job.id)
        if entry is None or entry.owner is None or entry.generation != claim.generation:
            raise ClaimLost(f"claim of job {claim.job.id} (generation {claim.generation}) is no longer current")
        if entry.owner != claim.owner:
            raise NotOwner(f"job {claim.job.id} is owned by {entry.owner}, not {claim.owner}")
        return entry

    def consume(self, claim: Claim, raw: bytes) -> None:
        """Remove the claimed job; ``raw`` (the encoded result) goes to its dependents and is kept if asked."""
        entry = self.current(claim)
        del self.jobs[entry.job_id]
        if entry.posting.group is not None:
            self.flow.left(entry)
        self._settled(entry)
        if entry.posting.keep_result:
            self.kept_results[entry.job_id] = raw
            self.kept_at[entry.job_id] = (time.time(), entry.posting.result_ttl)
        self._publish(Event(EventKind.CONSUMED, entry.job_id, entry.posting.name))
        for dependent_id in entry.dependents:
            dependent = self.jobs.get(dependent_id)
            if dependent is not None:  # None: trashed with another of its dependencies
                self._deliver(dependent, entry.job_id, raw)

    def _deliver(self, dependent: Entry, dep_id: str, raw: bytes) -> None:
        dependent.results[dep_id] = raw
        dependent.waiting_on.discard(dep_id)
        if not dependent.waiting_on:
            self._make_ready(dependent)
            self._publish(Event(EventKind.READY, dependent.job_id, dependent.posting.name))

    def release(self, entry: Entry, not_before: float | None, why: str) -> None:
        """Put a claimed entry back on the board."""
        entry.posting = entry.posting.delayed(not_before)
        entry.owner, entry.holder = None, None
        if entry.posting.group is not None:
            self.flow.released(entry)
        self._make_ready(entry)
        self._publish(Event(EventKind.RELEASED, entry.job_id, why))

    def cancel(self, job_id: str, reason: str, now: float) -> None:
        """Trash a job, revoking its claim if it has one (see ``JobBoard.cancel``)."""
        self.move_to_trash(self.entry(job_id), reason, now)

    def move_to_trash(self, entry: Entry, reason: str, now: float) -> None:
        """Trash an entry and, recursively, every job that depends on it."""
        del self.jobs[entry.job_id]
        if entry.posting.group is not None:
            self.flow.left(entry)
        self._settled(entry)
        entry.progress = None  # it went with the claim
        self.trash[entry.job_id] = TrashedJob(entry.job(), reason, now)
        self.trashed_entries[entry.job_id] = entry
        self._publish(Event(EventKind.TRASHED, entry.job_id, reason))
        for dependent_id in entry.dependents:
            dependent = self.jobs.get(dependent_id)
            if dependent is not None:
                cause = f"dependency {entry.job_id} ({entry.posting.name}) was trashed: {reason}"
                self.move_to_trash(dependent, cause, now)

    def held_by(self, holder: object) -> Iterator[Entry]:
        return (e for e in list(self.jobs.values()) if e.holder is holder)


def _delayed(entry: Entry, now: float) -> bool:
    return entry.posting.not_before is not None and entry.posting.not_before > now


def wall_clock() -> float:
    return time.time()
