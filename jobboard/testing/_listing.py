"""Conformance: ``listing()``, the jobs on the board with their state and owner."""

from __future__ import annotations

from jobboard.board.contract import JobBoard
from jobboard.job import JobState, ListedJob
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed_ids


async def listing(board: JobBoard, *, only_unclaimed: bool = False) -> list[ListedJob]:
    return [item async for item in board.listing(only_unclaimed=only_unclaimed)]


class ListingConformance(ConformanceBase):
    @bounded
    async def test_listing_gives_each_job_its_state_and_owner(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        first = await board.post("first")
        waiting = await board.post("after-first", depends_on=[first])
        taken = await board.post("taken", priority="high")
        await other.claim(taken, "w-other")
        items = await listing(board)
        assert [item.job.id for item in items] == await listed_ids(board) == [taken.id, first.id, waiting.id]
        assert [(item.job.name, item.state, item.owner) for item in items] == [
            ("taken", JobState.CLAIMED, "w-other"), ("first", JobState.UNCLAIMED, None),
            ("after-first", JobState.WAITING, None)]
        for item in items:  # the listing agrees with the one-job reads
            assert (await board.state(item.job), await board.owner(item.job)) == (item.state, item.owner)
        assert [item.job.id for item in await listing(board, only_unclaimed=True)] == [first.id]

    @bounded
    async def test_listing_leaves_out_settled_jobs_and_malformed_entries(self, board: JobBoard) -> None:
        done, trashed, kept = await board.post("done"), await board.post("trashed"), await board.post("kept")
        claim = await board.claim(done, "w1")
        await board.consume(claim)
        await board.cancel(trashed, "not wanted")
        await self.inject_malformed(board)
        assert [(item.job.id, item.state) for item in await listing(board)] == [(kept.id, JobState.UNCLAIMED)]
