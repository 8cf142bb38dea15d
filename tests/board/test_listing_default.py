"""The contract's default ``listing()`` (for backends that only implement ``iterjobs``)."""

from __future__ import annotations

import uuid

import anyio

from jobboard.board.contract import JobBoard
from jobboard.job import JobState
from jobboard_memory.board import MemoryBoard


class IterjobsOnlyBoard(MemoryBoard):
    listing = JobBoard.listing


async def test_the_default_listing_reads_state_and_owner_per_job() -> None:
    with anyio.fail_after(5):
        url = f"memory://{uuid.uuid4().hex}"
        async with MemoryBoard(url) as board, IterjobsOnlyBoard(url) as plain:
            first = await board.post("first")
            waiting = await board.post("after", depends_on=[first])
            taken = await board.post("taken", priority="high")
            await board.claim(taken, "w1")
            done = await board.post("done")
            await board.consume(await board.claim(done, "w1"))
            listed = [(item.job.id, item.state, item.owner) async for item in plain.listing()]
            assert listed == [(taken.id, JobState.CLAIMED, "w1"), (first.id, JobState.UNCLAIMED, None),
                              (waiting.id, JobState.WAITING, None)]
            assert [item.job.id async for item in plain.listing(only_unclaimed=True)] == [first.id]
