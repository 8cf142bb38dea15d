"""Conformance: flow control's edges, where backends were found to differ (issue 27's review).

A permit is every live claim of a group, whenever it was taken; a sequence runs one job at a time
whatever put an earlier job back; only a claim that was taken counts in a rate, and a rate's window
outlives a limit cleared and set again; ``limits()`` counts the same jobs on every backend.
"""

from __future__ import annotations

import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import HeldBack
from jobboard.testing._base import bounded
from jobboard.testing._limits import FlowControlBase


class LimitEdgesConformance(FlowControlBase):
    @bounded
    async def test_claims_taken_before_a_limit_are_its_permits(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        jobs = [await board.post("w", group="g") for _ in range(3)]
        assert await board.claim_next("a") and await board.claim_next("a")
        await board.set_limit("g", concurrency=1)
        assert await self.running(board, "g") == (2, 1)
        assert await board.claim_next("b") is None
        with pytest.raises(HeldBack):
            await board.claim(jobs[2].id, "b")

    @bounded
    async def test_a_rate_only_group_lists_its_running_jobs(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        await board.set_limit("r", rate=(100, 1.0))
        await board.post("w", group="r")
        await board.post("w", group="r")
        assert await board.claim_next("a")
        assert await self.running(board, "r") == (1, 1)

    @bounded
    async def test_a_sequence_set_while_a_later_job_runs_waits_for_it(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        first = await board.post("w", group="g")
        second = await board.post("w", group="g")
        await board.claim(second.id, "a")
        await board.set_limit("g", sequence=True)
        assert await board.claim_next("b") is None
        with pytest.raises(HeldBack):
            await board.claim(first.id, "b")

    @bounded
    async def test_a_requeued_head_waits_for_the_later_job_running(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        self.skip_if_unsupported("requeue")
        await board.set_limit("g", sequence=True)
        first = await board.post("w", group="g")
        second = await board.post("w", group="g")
        head = await board.claim_next("a")
        assert head is not None and head.job.id == first.id
        await board.trash(head, "bad")
        later = await board.claim_next("a")
        assert later is not None and later.job.id == second.id
        await board.requeue(first.id)
        assert await board.claim_next("b") is None
        with pytest.raises(HeldBack):
            await board.claim(first.id, "b")
        await board.consume(later)
        again = await board.claim_next("b")
        assert again is not None and again.job.id == first.id

    @bounded
    async def test_a_claim_that_trashes_its_job_takes_no_rate_permit(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        await board.set_limit("g", rate=(2, 600.0))
        spent = await board.post("w", group="g", max_attempts=1)
        other = await board.post("w", group="g")
        claim = await board.claim_next("a")
        assert claim is not None and claim.job.id == spent.id
        await board.abandon(claim)
        got = await board.claim_next("a")  # ``spent`` goes to the trash on the way: ``other`` has the 2nd permit
        assert got is not None and got.job.id == other.id

    @bounded
    async def test_a_rate_window_outlives_its_limit_cleared_and_set_again(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        await board.set_limit("g", rate=(2, 600.0))
        for _ in range(4):
            await board.post("w", group="g")
        assert await board.claim_next("a") and await board.claim_next("a")
        assert await board.claim_next("a") is None
        await board.clear_limit("g")
        await board.set_limit("g", rate=(2, 600.0))
        assert await board.claim_next("a") is None

    @bounded
    async def test_waiting_counts_ready_held_and_delayed_jobs_not_dependents(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        dependency = await board.post("d")
        await board.post("w", group="g", depends_on=[dependency.id])
        await board.post("w", group="g", delay=600)
        await board.post("w", group="g")
        assert await self.running(board, "g") == (0, 2)
