"""A small, pure model of the :class:`~jobboard.board.contract.JobBoard` contract.

No I/O and no backend code: it states what every backend must do, step by step,
for model-based tests (:mod:`jobboard.testing.stateful` drives a real board and
this model side by side and compares them after every step).

Operations mutate the model exactly as the contract says a board changes and
raise the contract's errors (the classes of :mod:`jobboard.errors`) where a
board must raise them, *after* any change the board makes on that path (a
claim of an exhausted job trashes it, then raises ``JobNotFound``).

Jobs are named by their posting index (0, 1, 2, ...); mapping those to a
backend's ids is the caller's business.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from jobboard.errors import (
    AlreadyClaimed,
    ClaimLost,
    DependencyMissing,
    InvalidJob,
    JobNotFound,
    NotClaimable,
    NotOwner,
)
from jobboard.job import JobState, Priority

ON_BOARD = (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING)
INTERNAL = "jobboard."


def offered(name: str, names: Collection[str] | None) -> bool:
    """Whether ``claim_next(names=names)`` may hand out a job called ``name``."""
    return not name.startswith(INTERNAL) if names is None else name in names


def exhausted_reason(limit: int) -> str:
    return f"max attempts exceeded ({limit})"


@dataclass
class ModelJob:
    """One job as the contract sees it."""

    index: int
    name: str
    priority: Priority
    depends_on: tuple[int, ...]
    max_attempts: int | None
    keep_result: bool
    details: dict[str, Any]
    key: str | None = None
    state: JobState = JobState.UNCLAIMED
    attempts: int = 0
    generation: int = 0
    """How many times the job was claimed: a claim is current only at the latest one."""
    owner: str | None = None
    holder: int | None = None
    """The board slot whose claim this is (released when that board closes)."""
    delayed: bool = False
    """Abandoned with a ``retry_after`` that does not end during a test."""
    results: dict[int, Any] = field(default_factory=dict)
    dependents: list[int] = field(default_factory=list)
    result: Any = None
    reason: str | None = None
    """Why it was trashed (for a cascade: the reason given for the job it started from)."""
    cause: int | None = None
    """The dependency whose trashing trashed this job (the board's reason names it)."""
    trash_group: int = 0
    """Which trashing operation moved it (jobs of one cascade share it)."""

    @property
    def on_board(self) -> bool:
        return self.state in ON_BOARD

    @property
    def exhausted(self) -> bool:
        return self.max_attempts is not None and self.attempts >= self.max_attempts

    def sort_key(self) -> tuple[int, int]:
        return (self.priority.rank, self.index)


@dataclass(frozen=True, slots=True)
class ModelClaim:
    """A claim as the model tracks it."""

    job: int
    owner: str
    generation: int
    slot: int


class ContractModel:
    """The state of one board (shared by every board opened on its URL)."""

    def __init__(self) -> None:
        self.jobs: list[ModelJob] = []
        self.keys: dict[str, int] = {}
        self._trash_groups = 0

    # -- reading -------------------------------------------------------------

    def board(self) -> list[ModelJob]:
        """Jobs on the board in board order: priority, then posting order."""
        return sorted((job for job in self.jobs if job.on_board), key=ModelJob.sort_key)

    def unclaimed(self) -> list[ModelJob]:
        return [job for job in self.board() if job.state is JobState.UNCLAIMED]

    def trashed(self) -> list[ModelJob]:
        return [job for job in self.jobs if job.state is JobState.TRASHED]

    def job(self, index: int | None) -> ModelJob | None:
        return None if index is None else self.jobs[index]

    def dependency_results(self, index: int) -> tuple[Any, ...]:
        job = self.jobs[index]
        return tuple(job.results[dep] for dep in job.depends_on)

    def reaches_twice(self, index: int) -> bool:
        """Whether trashing job ``index`` reaches some dependent along two paths (a diamond)."""
        paths: dict[int, int] = {}
        todo = [index]
        while todo:
            for dependent in self.jobs[todo.pop()].dependents:
                if self.jobs[dependent].on_board:
                    paths[dependent] = paths.get(dependent, 0) + 1
                    if paths[dependent] > 1:
                        return True
                    todo.append(dependent)
        return False

    def candidates(self, names: Collection[str] | None) -> list[ModelJob]:
        """What ``claim_next(names=names)`` looks at, in order: unclaimed, not delayed, offered."""
        return [job for job in self.unclaimed() if not job.delayed and offered(job.name, names)]

    # -- producing -----------------------------------------------------------

    def post(
        self, name: str, *, priority: Priority = Priority.NORMAL, depends_on: tuple[int, ...] = (),
        max_attempts: int | None = None, keep_result: bool = False,
        details: dict[str, Any] | None = None, key: str | None = None,
    ) -> ModelJob:
        """:raises InvalidJob: a dependency named twice. :raises DependencyMissing: one not on the board."""
        if key is not None and key in self.keys:
            return self.jobs[self.keys[key]]
        if len(set(depends_on)) != len(depends_on):
            raise InvalidJob("depends_on names a job twice")
        if any(not self.jobs[dep].on_board for dep in depends_on):
            raise DependencyMissing("a dependency is not on the board")
        job = ModelJob(len(self.jobs), name, priority, depends_on, max_attempts, keep_result,
                       dict(details or {}), key)
        if depends_on:
            job.state = JobState.WAITING
        for dep in depends_on:
            self.jobs[dep].dependents.append(job.index)
        self.jobs.append(job)
        if key is not None:
            self.keys[key] = job.index
        return job

    # -- claiming ------------------------------------------------------------

    def claim(self, index: int | None, owner: str, slot: int) -> ModelClaim:
        """:raises JobNotFound, NotClaimable, AlreadyClaimed: as ``JobBoard.claim`` says."""
        job = self.job(index)
        if job is None or not job.on_board:
            raise JobNotFound("not on the board")
        if job.state is JobState.WAITING:
            raise NotClaimable("waiting for dependencies")
        if job.state is JobState.CLAIMED:
            raise AlreadyClaimed(f"claimed by {job.owner}")
        if job.delayed:
            raise NotClaimable("delayed")
        if job.exhausted:
            assert job.max_attempts is not None
            self._trash(job, exhausted_reason(job.max_attempts))
            raise JobNotFound("exhausted: moved to the trash")
        return self._take(job, owner, slot)

    def _take(self, job: ModelJob, owner: str, slot: int) -> ModelClaim:
        job.state, job.owner, job.holder = JobState.CLAIMED, owner, slot
        job.attempts += 1
        job.generation += 1
        return ModelClaim(job.index, owner, job.generation, slot)

    def claim_next(self, owner: str, slot: int, names: Collection[str] | None) -> ModelClaim | None:
        """The best claimable offered job, trashing exhausted ones met on the way."""
        group = self.new_group()
        for job in self.candidates(names):
            if not job.exhausted:
                return self._take(job, owner, slot)
            self.trash_exhausted(job.index, group)
        return None

    def claim_chosen(
        self, index: int, owner: str, slot: int, names: Collection[str] | None,
    ) -> ModelClaim:
        """Claim the job a backend chose in ``claim_next`` (for backends that need not pick the best).

        :raises AssertionError: ``claim_next(names=names)`` could not hand out that job.
        """
        job = self.jobs[index]
        assert job in self.candidates(names), f"claim_next handed out job {index}, which it may not: {job}"
        assert not job.exhausted, f"job {index} used its attempts: it must be trashed, not handed out"
        return self._take(job, owner, slot)

    def trash_exhausted(self, index: int, group: int | None = None) -> None:
        """A claimer met job ``index`` with its attempts used up and trashed it."""
        job = self.jobs[index]
        assert job.state is JobState.UNCLAIMED and job.exhausted and job.max_attempts is not None, job
        self._trash(job, exhausted_reason(job.max_attempts), group)

    # -- settling ------------------------------------------------------------

    def current(self, claim: ModelClaim) -> ModelJob:
        """:raises ClaimLost: the claim is stale. :raises NotOwner: another owner at its generation."""
        job = self.jobs[claim.job]
        if job.state is not JobState.CLAIMED or job.generation != claim.generation:
            raise ClaimLost("the claim is not current")
        if job.owner != claim.owner:
            raise NotOwner(f"owned by {job.owner}")
        return job

    def consume(self, claim: ModelClaim, result: Any) -> None:
        job = self.current(claim)
        job.state, job.owner, job.holder, job.result = JobState.COMPLETE, None, None, result
        for dependent in map(self.jobs.__getitem__, job.dependents):
            if dependent.state is JobState.WAITING:
                dependent.results[job.index] = result
                if len(dependent.results) == len(dependent.depends_on):
                    dependent.state = JobState.UNCLAIMED

    def abandon(self, claim: ModelClaim, *, delayed: bool) -> None:
        job = self.current(claim)
        self._release(job)
        job.delayed = delayed

    def trash(self, claim: ModelClaim, reason: str) -> None:
        self._trash(self.current(claim), reason)

    def cancel(self, index: int | None, reason: str) -> None:
        """Trash a job on the board, claimed or not (a claim goes stale). :raises JobNotFound:"""
        job = self.job(index)
        if job is None or not job.on_board:
            raise JobNotFound("not on the board")
        self._trash(job, reason)

    def close(self, slot: int) -> None:
        """A board closed: its claims go back on the board, their attempts counted."""
        for job in self.jobs:
            if job.state is JobState.CLAIMED and job.holder == slot:
                self._release(job)

    def _release(self, job: ModelJob) -> None:
        job.state, job.owner, job.holder = JobState.UNCLAIMED, None, None

    def new_group(self) -> int:
        self._trash_groups += 1
        return self._trash_groups

    def _trash(self, job: ModelJob, reason: str, group: int | None = None) -> None:
        """Trash ``job`` and, recursively, its dependents still on the board."""
        group = self.new_group() if group is None else group
        job.state, job.owner, job.holder = JobState.TRASHED, None, None
        job.reason, job.cause, job.trash_group = reason, None, group
        for dependent in map(self.jobs.__getitem__, job.dependents):
            if dependent.on_board:
                self._trash(dependent, reason, group)
                dependent.cause = job.index
