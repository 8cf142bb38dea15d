"""Comparing a real board with :class:`~jobboard.testing.model.ContractModel` (no hypothesis here)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from jobboard.board.contract import JobBoard
from jobboard.errors import JobNotFound
from jobboard.job import Claim, Job, JobState, Outcome
from jobboard.testing.model import ContractModel, ModelClaim, ModelJob

EXHAUSTED = "max attempts exceeded"


@dataclass
class Ids:
    """The board's ids of the model's jobs (by posting index), and what was seen of them."""

    ids: list[str] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    generations: dict[int, int] = field(default_factory=dict)
    """The highest claim generation the board handed out for each job."""

    def __getitem__(self, index: int) -> str:
        return self.ids[index]

    def add(self, job: Job) -> None:
        assert job.id not in self.ids, f"post returned the id of an earlier job: {job.id}"
        assert not self.sequences or job.sequence > self.sequences[-1], (
            f"job {job.id}: sequence {job.sequence} is not above the last post's {self.sequences[-1]}")
        self.ids.append(job.id)
        self.sequences.append(job.sequence)


def job_fields(job: Job, ids: Ids, now: float) -> dict[str, Any]:
    """What the model knows of a job snapshot, read from the board's :class:`Job`."""
    return {
        "name": job.name, "priority": job.priority, "depends_on": job.depends_on,
        "max_attempts": job.max_attempts, "attempts": job.attempts, "keep_result": job.keep_result,
        "details": dict(job.details), "delayed": job.not_before is not None and job.not_before > now,
        "sequence": job.sequence,
    }


def model_fields(job: ModelJob, ids: Ids) -> dict[str, Any]:
    return {
        "name": job.name, "priority": job.priority, "depends_on": tuple(ids[d] for d in job.depends_on),
        "max_attempts": job.max_attempts, "attempts": job.attempts, "keep_result": job.keep_result,
        "details": job.details, "delayed": job.delayed, "sequence": ids.sequences[job.index],
    }


def check_job(job: Job, expected: ModelJob, ids: Ids, what: str) -> None:
    assert job.id == ids[expected.index], f"{what}: job {job.id}, the model expected {ids[expected.index]}"
    actual, wanted = job_fields(job, ids, time.time()), model_fields(expected, ids)
    assert actual == wanted, f"{what}: job {job.id} is {actual}, the model says {wanted}"


def check_claim(claim: Claim, expected: ModelClaim, model: ContractModel, ids: Ids) -> None:
    """A claim the board handed out against the model's (and the fencing rule)."""
    job = model.jobs[expected.job]
    check_job(claim.job, job, ids, "claim")
    assert (claim.owner, claim.attempt) == (expected.owner, job.attempts), (
        f"claim of {claim.job.id}: owner {claim.owner!r} attempt {claim.attempt}, "
        f"the model says {expected.owner!r} attempt {job.attempts}")
    last = ids.generations.get(expected.job)
    assert last is None or claim.generation > last, (
        f"claim of {claim.job.id}: generation {claim.generation} is not above the last claim's {last}")
    ids.generations[expected.job] = claim.generation
    results = model.dependency_results(expected.job)
    assert claim.dependency_results == results, (
        f"claim of {claim.job.id}: dependency results {claim.dependency_results}, the model says {results}")


def check_reason(reason: str | None, job: ModelJob, ids: Ids, model: ContractModel) -> None:
    """A reason given by a caller is kept as given; derived ones name their cause (as the conformance
    suite asks: the contract does not fix their wording). A job that one cascade reached along
    several paths (a diamond) may name any dependency that cascade trashed."""
    job_id, wanted = ids[job.index], job.reason
    assert reason is not None and wanted is not None, (
        f"job {job_id}: reason {reason!r}, the model says {wanted!r}")
    if job.cause is not None:
        causes = [ids[dep] for dep in job.depends_on if model.jobs[dep].trash_group == job.trash_group]
        assert any(cause in reason for cause in causes), (
            f"job {job_id}: reason {reason!r} names none of {causes}")
    if wanted.startswith(EXHAUSTED):
        assert EXHAUSTED in reason, f"job {job_id}: reason {reason!r}, the model says {wanted!r}"
    elif job.cause is not None:
        assert wanted in reason, f"job {job_id}: reason {reason!r} does not carry {wanted!r}"
    else:
        assert reason == wanted, f"job {job_id}: reason {reason!r}, the model says {wanted!r}"


async def check_board(board: JobBoard, model: ContractModel, ids: Ids) -> None:
    """Listings, count, and each job's state, owner and snapshot, through ``board``."""
    listing = [job async for job in board.iterjobs()]
    expected = model.board()
    assert [job.id for job in listing] == [ids[job.index] for job in expected], (
        f"iterjobs: {[job.id for job in listing]}, the model says {[ids[job.index] for job in expected]}")
    for job, wanted in zip(listing, expected, strict=True):
        check_job(job, wanted, ids, "iterjobs")
    unclaimed = [job.id async for job in board.iterjobs(only_unclaimed=True)]
    expected_unclaimed = [ids[job.index] for job in model.unclaimed()]
    assert unclaimed == expected_unclaimed, (
        f"iterjobs(only_unclaimed): {unclaimed}, the model says {expected_unclaimed}")
    assert await board.job_count() == len(expected)
    for modelled in model.jobs:
        await check_one(board, modelled, ids)


async def check_one(board: JobBoard, job: ModelJob, ids: Ids) -> None:
    job_id = ids[job.index]
    state, owner = await board.state(job_id), await board.owner(job_id)
    assert (state, owner) == (job.state, job.owner), (
        f"job {job_id}: state {state} owner {owner!r}, the model says {job.state} owner {job.owner!r}")
    if job.on_board:
        check_job(await board.get(job_id), job, ids, "get")
        return
    try:
        found = await board.get(job_id)
    except JobNotFound:
        return
    raise AssertionError(f"get({job_id}) returned {found} for a job that left the board ({job.state})")


async def check_trash(board: JobBoard, model: ContractModel, ids: Ids) -> None:
    """The trash: the same jobs, oldest trashing first, each with its reason."""
    items = [item async for item in board.trashed()]
    expected = {ids[job.index]: job for job in model.trashed()}
    listed = [item.job.id for item in items]
    assert sorted(listed) == sorted(expected), f"trashed(): {listed}, the model says {sorted(expected)}"
    groups = [expected[job_id].trash_group for job_id in listed]
    assert groups == sorted(groups), f"trashed() is not oldest first: {listed}"
    for item in items:
        job = expected[item.job.id]
        assert (item.job.name, dict(item.job.details)) == (job.name, job.details), item
        check_reason(item.reason, job, ids, model)


async def check_outcome(board: JobBoard, job: ModelJob, ids: Ids, model: ContractModel) -> None:
    """``wait_for_completion`` of a job that left the board returns how it ended (the caller bounds it)."""
    job_id = ids[job.index]
    outcome: Outcome = await board.wait_for_completion(job_id)
    assert (outcome.job_id, outcome.state) == (job_id, job.state), (
        f"outcome {outcome}, the model says {job.state}")
    if job.state is JobState.COMPLETE:
        kept = job.result if job.keep_result else None
        assert outcome.result == kept, (
            f"outcome of {job_id}: result {outcome.result!r}, the model says {kept!r}")
    else:
        check_reason(outcome.reason, job, ids, model)
