"""The state of one ``dict://`` board, shared by every board opened on its name. Every method is synchronous
and never awaits, so on one event loop each is atomic: this backend's whole concurrency story (a backend
over a database gets it from one transaction per operation). Changes are told to ``publish``."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from jobboard.backend import (
    Claim,
    DependencyMissing,
    Event,
    EventKind,
    Job,
    JobState,
    Outcome,
    Posting,
    TrashedJob,
    decode_value,
)
from jobboard.errors import AlreadyClaimed, ClaimLost, JobNotFound, NotClaimable, NotOwner

ID_PREFIX = "dict-"


@dataclass(eq=False)
class Entry:
    """One job on the board: its posting (attempts, delay and dependency results live there) and claim."""

    job_id: str
    sequence: int
    posting: Posting
    owner: str | None = None
    holder: object = None  # the backend whose claim this is (released when that backend closes)
    generation: int = 0  # the fencing token: one more at every claim

    def job(self) -> Job:
        return self.posting.to_job(self.job_id, self.sequence)

    def state(self) -> JobState:
        if self.posting.waiting_on:
            return JobState.WAITING
        return JobState.CLAIMED if self.owner is not None else JobState.UNCLAIMED

    def claimable(self, now: float, names: Collection[str] | None) -> bool:
        due = self.posting.not_before is None or self.posting.not_before <= now
        name = self.posting.name  # the routing rule: names given, only those; else all but jobboard.* jobs
        wanted = name in names if names is not None else not name.startswith("jobboard.")
        return self.state() is JobState.UNCLAIMED and due and wanted


class Store:
    """Jobs, trash, kept results and idempotency keys of one named ``dict://`` board."""

    def __init__(self, publish: Callable[[Event], None]) -> None:
        self.publish = publish
        self.jobs: dict[str, Entry] = {}
        self.trash: dict[str, TrashedJob] = {}
        self.kept: dict[str, bytes] = {}  # results of consumed keep_result jobs, encoded (kept forever)
        self.keys: dict[str, tuple[str, Job | None, float]] = {}  # key -> job id, job as settled, when
        self.malformed: dict[str, bytes] = {}  # entries that are not postings (from inject_malformed only)
        self.last_sequence = 0

    def keyed(self, key: str | None, retention: float) -> Job | None:
        """The job ``key`` still finds: on the board, or settled less than ``retention`` seconds ago."""
        if key is None or (record := self.keys.get(key)) is None:
            return None
        job_id, settled, settled_at = record
        if settled is None:
            return self.jobs[job_id].job()
        if time.monotonic() - settled_at < retention:
            return settled
        del self.keys[key]
        return None

    def admit(self, posting: Posting) -> Job:
        """Add a checked posting. :raises DependencyMissing: a dependency is not on the board (nothing added)."""
        missing = [dep for dep in posting.depends_on if dep not in self.jobs]
        if missing:
            raise DependencyMissing.of(posting.name, ", ".join(missing))
        self.last_sequence += 1
        entry = Entry(f"{ID_PREFIX}{self.last_sequence}", self.last_sequence, posting)
        self.jobs[entry.job_id] = entry
        if posting.key is not None:
            self.keys[posting.key] = (entry.job_id, None, 0.0)
        self.publish(Event(EventKind.POSTED, entry.job_id, posting.name))
        return entry.job()

    def entry(self, job_id: str) -> Entry:
        """:raises JobNotFound: the job is not on the board."""
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(f"job {job_id} is not on the board") from None

    def ordered(self) -> list[Entry]:
        """Board order: priority, then age. O(n log n) per call: a real backend keeps an index."""
        return sorted(self.jobs.values(), key=lambda e: (e.posting.priority.rank, e.sequence))

    def state(self, job_id: str) -> JobState:
        if job_id in self.jobs:
            return self.jobs[job_id].state()
        return JobState.TRASHED if job_id in self.trash else JobState.COMPLETE

    def outcome(self, job_id: str) -> Outcome | None:
        if job_id in self.jobs:
            return None
        if job_id in self.trash:
            return Outcome(job_id, JobState.TRASHED, reason=self.trash[job_id].reason)
        raw = self.kept.get(job_id)
        return Outcome(job_id, JobState.COMPLETE, result=None if raw is None else decode_value(raw))

    def next_due(self, now: float) -> float | None:  # seconds until the first delayed job is due
        due = [e.posting.not_before - now for e in self.jobs.values()
               if e.posting.not_before is not None and e.state() is JobState.UNCLAIMED]
        return max(0.0, min(due)) if due else None

    def claim(self, job_id: str, owner: str, holder: object, now: float) -> Claim:
        """See ``JobBoard.claim``: one more attempt, one more generation, or the trash past ``max_attempts``."""
        entry = self.entry(job_id)
        if entry.posting.waiting_on:
            raise NotClaimable(f"job {job_id} is waiting for {len(entry.posting.waiting_on)} dependencies")
        if entry.owner is not None:
            raise AlreadyClaimed(f"job {job_id} is claimed by {entry.owner}")
        if entry.posting.not_before is not None and entry.posting.not_before > now:
            raise NotClaimable(f"job {job_id} is delayed")
        limit = entry.posting.max_attempts
        if limit is not None and entry.posting.attempts >= limit:
            self.move_to_trash(entry, f"max attempts exceeded ({limit})", now)
            raise JobNotFound(f"job {job_id} used its {limit} attempts and was moved to the trash")
        entry.posting, entry.owner, entry.holder = entry.posting.claimed(), owner, holder
        entry.generation += 1
        self.publish(Event(EventKind.CLAIMED, job_id, owner))
        return Claim(entry.job(), owner, entry.generation, entry.posting.dependency_results())

    def claim_next(self, owner: str, holder: object, now: float, names: Collection[str] | None) -> Claim | None:
        for entry in self.ordered():
            if entry.claimable(now, names):
                try:
                    return self.claim(entry.job_id, owner, holder, now)
                except JobNotFound:  # it used its attempts: trashed, try the next one
                    continue
        return None

    def current(self, claim: Claim) -> Entry:
        """The fence. :raises ClaimLost: settled, released or claimed again. :raises NotOwner: another owner."""
        entry = self.jobs.get(claim.job.id)
        if entry is None or entry.owner is None or entry.generation != claim.generation:
            raise ClaimLost(f"claim of job {claim.job.id} (generation {claim.generation}) is no longer current")
        if entry.owner != claim.owner:
            raise NotOwner(f"job {claim.job.id} is owned by {entry.owner}, not {claim.owner}")
        return entry

    def lost_because(self, claim: Claim) -> str | None:
        """Why ``claim`` stopped being current, or ``None`` while it is."""
        entry = self.jobs.get(claim.job.id)
        if entry is None:
            return "trashed" if claim.job.id in self.trash else "consumed"
        if entry.generation != claim.generation:
            return "claimed again"
        return "released" if entry.owner is None else None

    def consume(self, claim: Claim, raw_result: bytes) -> None:
        """Remove the job; its result goes to its dependents (released by the last one) and is kept if asked."""
        entry = self.current(claim)
        self._leave(entry)
        if entry.posting.keep_result:
            self.kept[entry.job_id] = raw_result
        self.publish(Event(EventKind.CONSUMED, entry.job_id, entry.posting.name))
        result = decode_value(raw_result)
        for dependent in self._dependents_of(entry):
            dependent.posting = dependent.posting.with_result(entry.job_id, result)
            if not dependent.posting.waiting_on:
                self.publish(Event(EventKind.READY, dependent.job_id, dependent.posting.name))

    def release(self, entry: Entry, not_before: float | None, why: str) -> None:
        """Put a claimed job back, claimable from ``not_before`` (``None``: now)."""
        entry.posting, entry.owner, entry.holder = entry.posting.delayed(not_before), None, None
        self.publish(Event(EventKind.RELEASED, entry.job_id, why))

    def move_to_trash(self, entry: Entry, reason: str, now: float) -> None:
        """Trash the job and, in the same step, every job on the board that depends on it."""
        self._leave(entry)
        self.trash[entry.job_id] = TrashedJob(entry.job(), reason, now)
        self.publish(Event(EventKind.TRASHED, entry.job_id, reason))
        for dependent in self._dependents_of(entry):
            if dependent.job_id in self.jobs:  # not trashed already, along another path
                cause = f"dependency {entry.job_id} ({entry.posting.name}) was trashed: {reason}"
                self.move_to_trash(dependent, cause, now)

    def _leave(self, entry: Entry) -> None:
        """The job leaves the board; its key keeps finding it, as settled, from now on."""
        del self.jobs[entry.job_id]
        if entry.posting.key is not None:
            self.keys[entry.posting.key] = (entry.job_id, entry.job(), time.monotonic())

    def _dependents_of(self, entry: Entry) -> list[Entry]:
        return [other for other in self.jobs.values() if entry.job_id in other.posting.depends_on]
