"""Conformance: progress of running jobs, retention of results and trash, purge and requeue."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, InvalidJob, JobNotFound, NotOwner
from jobboard.job import JobState
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed

EXPIRY_LIMIT = 10.0
"""Seconds an expired entry may take to be collected (the collector's pass, a loaded machine)."""


async def trashed_ids(board: JobBoard) -> set[str]:
    return {item.job.id async for item in board.trashed()}


async def eventually(condition: Callable[[], Awaitable[bool]], limit: float = EXPIRY_LIMIT) -> None:
    with anyio.fail_after(limit):
        for _ in itertools.count():  # polled: expiry is collected by the backend, no event tells it
            if await condition():
                return
            await anyio.sleep(0.1)


class KeepingConformance(ConformanceBase):
    @bounded
    async def test_progress_is_seen_by_every_board_and_goes_with_the_claim(
        self, open_boards: BoardOpener,
    ) -> None:
        self.skip_if_unsupported("report_progress")
        worker, reader = await open_boards(), await open_boards()
        job = await worker.post("long")
        claim = await worker.claim(job, "w")
        assert (await reader.get(job)).progress is None
        await worker.report_progress(claim, 0.25, "a quarter")
        seen = (await reader.get(job)).progress
        assert seen is not None and (seen.fraction, seen.note) == (0.25, "a quarter") and seen.at > 0
        await worker.report_progress(claim, 0.5)
        listed_progress = [j.progress for j in await listed(reader) if j.id == job.id]
        assert listed_progress[0] is not None and listed_progress[0].fraction == 0.5
        await worker.abandon(claim)
        assert (await reader.get(job)).progress is None
        second = await worker.claim(job, "w")
        assert (await reader.get(job)).progress is None  # a new claim starts without progress
        await worker.consume(second)

    @bounded
    async def test_progress_of_a_stale_claim_is_refused(self, open_boards: BoardOpener) -> None:
        self.skip_if_unsupported("report_progress")
        board, other = await open_boards(), await open_boards()
        job = await board.post("long")
        stale = await board.claim(job, "w")
        await board.report_progress(stale, 0.1)
        await board.abandon(stale)
        with pytest.raises(ClaimLost):
            await board.report_progress(stale, 0.2)
        current = await other.claim(job, "v")
        with pytest.raises(ClaimLost):
            await board.report_progress(stale, 0.3)
        with pytest.raises(NotOwner):
            await board.report_progress(dataclasses.replace(current, owner="intruder"), 0.3)
        progress = (await other.get(job)).progress
        assert progress is None
        for bad in (-0.1, 1.5, float("nan"), "half"):
            with pytest.raises(InvalidJob):
                await other.report_progress(current, bad)  # type: ignore[arg-type]
        await other.consume(current)
        with pytest.raises(ClaimLost):
            await other.report_progress(current, 1.0)

    @bounded
    async def test_expired_results_are_gone_and_live_ones_kept(self, open_boards: BoardOpener) -> None:
        self.skip_if_unsupported("result_ttl")
        board = await open_boards(result_ttl=1)
        assert board.result_ttl == 1.0, "?result_ttl=1 not taken"
        short = await board.post("a", keep_result=True)
        forever = await board.post("b", keep_result=True, result_ttl=0)
        long = await board.post("c", keep_result=True, result_ttl=600)
        for job in (short, forever, long):
            await board.consume(await board.claim(job, "w"), {"from": job.name})
        assert (await board.wait_for_completion(short)).result == {"from": "a"}

        async def short_expired() -> bool:
            return (await board.wait_for_completion(short)).result is None

        await eventually(short_expired)
        expired = await board.wait_for_completion(short)
        assert expired.state is JobState.COMPLETE and expired.result is None
        assert (await board.wait_for_completion(forever)).result == {"from": "b"}
        assert (await board.wait_for_completion(long)).result == {"from": "c"}

    @bounded
    async def test_expired_trash_entries_are_gone_and_live_ones_kept(self, open_boards: BoardOpener) -> None:
        self.skip_if_unsupported("trash_ttl")
        board = await open_boards(trash_ttl=1)
        assert board.trash_ttl == 1.0, "?trash_ttl=1 not taken"
        short = await board.post("a", key="short")
        forever = await board.post("b", trash_ttl=0)
        long = await board.post("c", trash_ttl=600)
        dependent = await board.post("d", depends_on=[short])
        await board.trash(await board.claim(short, "w"), "bad")
        for job in (forever, long):
            await board.cancel(job, "not wanted")
        assert await trashed_ids(board) == {short.id, forever.id, long.id, dependent.id}

        async def short_expired() -> bool:
            return {short.id, dependent.id}.isdisjoint(await trashed_ids(board))

        await eventually(short_expired)
        assert await trashed_ids(board) == {forever.id, long.id}
        assert await board.state(short) is JobState.COMPLETE
        assert (await board.wait_for_completion(long)).state is JobState.TRASHED
        assert (await board.post("a", key="short")).id != short.id  # its key went with it

    @bounded
    async def test_purge_removes_trash_older_than_given(self, board: JobBoard) -> None:
        self.skip_if_unsupported("purge")
        jobs = [await board.post(f"job-{n}", key=f"k{n}") for n in range(3)]
        kept = await board.post("on the board")
        for job in jobs:
            await board.cancel(job, "bad")
        assert await board.purge(older_than=3600) == 0
        assert len(await trashed_ids(board)) == 3
        assert await board.purge(older_than=0) == 3
        assert await trashed_ids(board) == set()
        assert await board.purge() == 0
        assert [job.id for job in await listed(board)] == [kept.id]
        assert await board.state(jobs[0]) is JobState.COMPLETE
        for bad in (-1, float("inf"), "7d"):
            with pytest.raises(InvalidJob):
                await board.purge(older_than=bad)  # type: ignore[arg-type]

    @bounded
    async def test_requeue_puts_a_trashed_job_back_with_its_id(self, board: JobBoard) -> None:
        self.skip_if_unsupported("requeue")
        job = await board.post("flaky", {"n": 1}, max_attempts=1, key="flaky-1")
        claim = await board.claim(job, "w")
        await board.trash(claim, "failed")
        newer = await board.post("flaky", {"n": 2})
        back = await board.requeue(job)
        assert back.id == job.id and back.attempts == 1 and dict(back.details) == {"n": 1}
        assert await board.state(job) is JobState.UNCLAIMED
        assert job.id not in await trashed_ids(board)
        assert [j.id for j in await listed(board)] == [job.id, newer.id]  # its place in the board order
        assert (await board.post("flaky", key="flaky-1")).id == job.id  # its key finds it on the board
        with pytest.raises(JobNotFound):  # attempts used up: trashed again at the claim
            await board.claim(job, "w")
        assert (await board.requeue(job, reset_attempts=True)).attempts == 0
        claim = await board.claim(job, "w")
        await board.consume(claim, "done")
        assert (await board.wait_for_completion(job)).state is JobState.COMPLETE
        with pytest.raises(JobNotFound):
            await board.requeue(job)
        with pytest.raises(JobNotFound):
            await board.requeue(newer)

    @bounded
    async def test_claim_next_offers_a_requeued_job(self, board: JobBoard) -> None:
        self.skip_if_unsupported("requeue")
        job = await board.post("flaky")
        claim = await board.claim_next("w")  # not claim(job): what the post queued for claim_next is used up
        assert claim is not None and claim.job.id == job.id
        await board.trash(claim, "failed")
        assert await board.claim_next("w") is None
        await board.requeue(job)
        again = await board.claim_next("w")
        assert again is not None and (again.job.id, again.attempt) == (job.id, 2)

    @bounded
    async def test_requeue_of_a_cascaded_dependent_is_refused(self, board: JobBoard) -> None:
        self.skip_if_unsupported("requeue")
        parent = await board.post("parent")
        child = await board.post("child", depends_on=[parent])
        await board.cancel(parent, "wrong input")
        assert await trashed_ids(board) == {parent.id, child.id}
        with pytest.raises(InvalidJob):
            await board.requeue(child)
        assert await board.state(child) is JobState.TRASHED
        await board.requeue(parent)
        assert await board.state(parent) is JobState.UNCLAIMED
        assert await board.state(child) is JobState.TRASHED
        await board.consume(await board.claim(parent, "w"))
        assert await trashed_ids(board) == {child.id}
