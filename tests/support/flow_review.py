"""Flow-control checks the review ran on redis:// and postgresql:// alike (tests/backends/*/test_flow_review.py):
each drives a board through one scenario and asserts what every backend must do."""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import HeldBack
from jobboard.job import Job, JobState


async def held_back_exhausted_job(board: JobBoard, case: str) -> Job:
    """A job whose attempts are used up, held back by ``case`` ('paused', 'sequence', 'concurrency')."""
    group = None if case == "paused" else "g"
    if case == "sequence":
        await board.set_limit("g", sequence=True)
        head = await board.post("w", group="g")
        await board.trash(await board.claim(head, "o"), "bad")  # a trashed job does not stop the sequence
    elif case == "concurrency":
        await board.set_limit("g", concurrency=1)
        head = await board.post("w", group="g")
    job = await board.post("w", group=group, max_attempts=1)
    await board.abandon(await board.claim(job, "o"))  # its one attempt used
    if case == "paused":
        await board.pause("w")
    elif case == "sequence":
        await board.requeue(head.id)  # back at its place, ahead of `job`
        await board.claim(head, "o")
    else:
        await board.claim(head, "o")  # the group's one permit
    return job


async def sequence_in_posting_order(board: JobBoard) -> None:
    """A sequence's jobs run in posting order: a later job of a higher priority waits, a delayed head holds the
    group until it is due, an abandoned head runs again first."""
    await board.set_limit("s", sequence=True)
    head = await board.post("w", group="s", delay=0.4)
    urgent = await board.post("w", group="s", priority="high")
    plain = await board.post("w")
    first = await board.claim_next("o")
    assert first is not None and first.job.id == plain.id  # the delayed head holds its group
    with pytest.raises(HeldBack):
        await board.claim(urgent, "o")
    await anyio.sleep(0.5)
    claim = await board.claim_next("o")
    assert claim is not None and claim.job.id == head.id
    await board.abandon(claim)
    again = await board.claim_next("o")
    assert again is not None and again.job.id == head.id
    await board.consume(again)
    last = await board.claim_next("o")
    assert last is not None and last.job.id == urgent.id


async def exhausted_at_claim_takes_no_grant(board: JobBoard) -> None:
    """A job trashed at claim_next for its used-up attempts takes no permit and no rate grant."""
    spent = await board.post("w", group="g", max_attempts=1, priority="high")
    await board.abandon(await board.claim(spent, "o"))
    await board.set_limit("g", concurrency=1, rate=(1, 60.0))
    plain = await board.post("w", group="g")
    await board.post("w", group="g")
    claim = await board.claim_next("o")
    assert claim is not None and claim.job.id == plain.id
    assert await board.state(spent) is JobState.TRASHED
    [limit] = await board.limits()
    assert (limit.running, limit.waiting) == (1, 1)
    await board.consume(claim)
    assert await board.claim_next("o") is None
