"""Conformance: the last error kept with a job, and cancelling a claimed job."""

from __future__ import annotations

import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, JobNotFound
from jobboard.job import JobState, LastError
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, reason_after


def sample_error(attempt: int) -> LastError:
    return LastError("ValueError", f"bad input on attempt {attempt}", "Traceback ...\nValueError: bad", attempt, 1.5)


class FailuresConformance(ConformanceBase):
    @bounded
    async def test_abandon_keeps_the_last_error_with_the_job(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        job = await board.post("convert")
        claim = await board.claim(job, "w1")
        assert claim.job.last_error is None
        await board.abandon(claim, error=sample_error(1))
        assert (await other.get(job)).last_error == sample_error(1)
        again = await board.claim(job, "w1")
        assert again.job.last_error == sample_error(1)  # kept while the job runs again
        await board.abandon(again, retry_after=30, error=sample_error(2))
        stored = await other.get(job)
        assert stored.last_error == sample_error(2) and stored.not_before is not None

    @bounded
    async def test_abandon_without_error_keeps_the_previous_one(self, board: JobBoard) -> None:
        job = await board.post("convert")
        await board.abandon(await board.claim(job, "w1"), error=sample_error(1))
        await board.abandon(await board.claim(job, "w1"))
        assert (await board.get(job)).last_error == sample_error(1)

    @bounded
    async def test_trash_keeps_the_last_error_in_the_trash(self, board: JobBoard) -> None:
        job = await board.post("convert")
        await board.trash(await board.claim(job, "w1"), "failed for good", error=sample_error(1))
        items = [item async for item in board.trashed()]
        assert [(i.job.id, i.reason, i.job.last_error) for i in items] == [
            (job.id, "failed for good", sample_error(1))]

    @bounded
    async def test_cancel_of_a_claimed_job_revokes_the_claim(self, open_boards: BoardOpener) -> None:
        owner, operator = await open_boards(), await open_boards()
        job = await owner.post("slow")
        child = await owner.post("after", depends_on=[job])
        claim = await owner.claim(job, "w1")
        assert await reason_after(owner, claim, lambda: operator.cancel(job, "operator said stop")) == "trashed"
        with pytest.raises(ClaimLost):
            await owner.consume(claim, "too late")
        assert await operator.state(job) is JobState.TRASHED and await operator.state(child) is JobState.TRASHED
        trashed = {item.job.id: item.reason async for item in operator.trashed()}
        assert trashed[job.id] == "operator said stop" and job.id in trashed[child.id]
        with pytest.raises(JobNotFound):
            await operator.cancel(job, "twice")
