"""Conformance: watching a claim, and filtering claims by job name."""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import JobNotFound
from jobboard.job import JobState
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, reason_after


class RoutingConformance(ConformanceBase):
    @bounded
    async def test_watch_claim_ends_when_another_board_settles(self, open_boards: BoardOpener) -> None:
        owner, other = await open_boards(), await open_boards()
        claim = await owner.claim(await owner.post("a"), "w1")
        reason = await reason_after(owner, claim, lambda: other.consume(claim, "done elsewhere"))
        assert reason == "consumed"

    @bounded
    async def test_watch_claim_ends_when_released_and_claimed_again(self, open_boards: BoardOpener) -> None:
        owner, other = await open_boards(), await open_boards()
        claim = await owner.claim(await owner.post("a"), "w1")

        async def steal() -> None:
            await other.abandon(claim)
            await other.claim(claim.job, "w2")

        assert await reason_after(owner, claim, steal) in ("released", "claimed again")
        assert await owner.watch_claim(claim) == "claimed again"

    @bounded
    async def test_watch_claim_ends_when_released(self, open_boards: BoardOpener) -> None:
        """A release (abandoned, or its board closed) that nobody claims after ends the watch: ``released``."""
        owner, other = await open_boards(), await open_boards()
        job = await owner.post("a")
        claim = await owner.claim(job, "w1")
        assert await reason_after(owner, claim, lambda: other.abandon(claim)) == "released"
        assert await owner.watch_claim(claim) == "released"
        closing = await other.claim(job, "w2")
        assert await reason_after(owner, closing, other.aclose) == "released"
        assert await owner.watch_claim(closing) == "released"

    @bounded
    async def test_watch_claim_ends_when_its_board_closes(self, open_boards: BoardOpener) -> None:
        owner = await open_boards()
        claim = await owner.claim(await owner.post("a"), "w1")
        assert await reason_after(owner, claim, owner.aclose) == "board closed"

    @bounded
    async def test_watch_claim_of_a_settled_claim_returns_at_once(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        await board.trash(claim, "no")
        assert await board.watch_claim(claim) == "trashed"

    @bounded
    async def test_claim_next_only_takes_the_names_asked_for(self, board: JobBoard) -> None:
        await board.post("resize", priority="high")
        wanted = await board.post("email")
        claim = await board.claim_next("w1", names={"email", "sms"})
        assert claim is not None and claim.job.id == wanted.id
        assert await board.claim_next("w1", names={"email"}) is None
        other = await board.claim_next("w1")
        assert other is not None and other.job.name == "resize"

    @bounded
    async def test_internal_jobs_are_only_offered_by_name(self, board: JobBoard) -> None:
        internal = await board.post("jobboard.bookkeeping", priority="very_high")
        ordinary = await board.post("work")
        claim = await board.claim_next("w1")
        assert claim is not None and claim.job.id == ordinary.id
        assert await board.claim_next("w1") is None
        taken = await board.claim_next("w1", names={"jobboard.bookkeeping"})
        assert taken is not None and taken.job.id == internal.id

    @bounded
    async def test_cancel_trashes_an_unclaimed_job_and_its_dependents(self, board: JobBoard) -> None:
        root = await board.post("root")
        child = await board.post("child", depends_on=[root])
        await board.cancel(root, "not needed")
        assert await board.state(root) is JobState.TRASHED and await board.state(child) is JobState.TRASHED
        reasons = {t.job.id: t.reason async for t in board.trashed()}
        assert reasons[root.id] == "not needed" and root.id in reasons[child.id]

    @bounded
    async def test_cancel_of_a_waiting_job_leaves_its_dependency(self, board: JobBoard) -> None:
        root = await board.post("root")
        child = await board.post("child", depends_on=[root])
        await board.cancel(child, "changed my mind")
        assert await board.state(child) is JobState.TRASHED
        await board.consume(await board.claim(root, "w1"), "fine")
        assert await board.job_count() == 0

    @bounded
    async def test_cancel_refuses_missing_jobs(self, board: JobBoard) -> None:
        with pytest.raises(JobNotFound):
            await board.cancel("job-that-does-not-exist", "no")

    @bounded
    async def test_wait_only_wakes_for_the_names_asked_for(self, open_boards: BoardOpener) -> None:
        waiter, poster = await open_boards(), await open_boards()
        await poster.post("resize")
        found: list[str] = []

        async def wait() -> None:
            found.extend(job.name for job in await waiter.wait(names={"email"}))

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.2)
            assert found == []
            await poster.post("email")
        assert found == ["email"]

    @bounded
    async def test_a_fused_claim_takes_the_job_another_board_posted(self, open_boards: BoardOpener) -> None:
        """``consume_and_claim_next`` hands out the next claimable job wherever it was posted: its board's own
        posts done, the one another board posted (on a board spread over partitions, in another partition)."""
        mine, other = await open_boards(), await open_boards()
        first = await mine.post("x")
        theirs = await other.post("x")
        claim = await mine.claim_next("w")
        assert claim is not None and claim.job.id == first.id
        following = await mine.consume_and_claim_next(claim)
        assert following is not None and following.job.id == theirs.id
        await mine.consume(following)

    @bounded
    async def test_the_trash_lists_every_boards_jobs_oldest_first(self, open_boards: BoardOpener) -> None:
        """``trashed()`` is oldest first across the jobs every board posted (on a board spread over partitions,
        merged from each partition's trash)."""
        one, two = await open_boards(), await open_boards()
        jobs = [await one.post("x"), await two.post("x"), await one.post("x"), await two.post("x")]
        order = [jobs[1], jobs[2], jobs[0], jobs[3]]
        for job in order:
            await one.cancel(job, "not needed")
            await anyio.sleep(0.02)  # a trash time of its own (a backend may keep milliseconds)
        assert [item.job.id async for item in two.trashed()] == [job.id for job in order]
