"""Conformance: sequences, rate limits, pause and resume, and ``wait`` under flow control (issue 27)."""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import HeldBack
from jobboard.job import Job, Priority
from jobboard.testing._base import BoardOpener, bounded
from jobboard.testing._flow_waking import SLACK
from jobboard.testing._limits import FlowControlBase


async def waited(board: JobBoard, limit: float) -> list[Job] | None:
    """``board.wait()``'s jobs, or ``None`` when it did not return within ``limit`` seconds."""
    with anyio.move_on_after(limit):
        return await board.wait()
    return None


class PacingConformance(FlowControlBase):
    @bounded
    async def test_a_sequence_runs_in_posting_order_and_continues_past_a_trashed_job(
        self, open_boards: BoardOpener,
    ) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("account-1", sequence=True)
        jobs = [await board.post("webhook", group="account-1", priority=priority)
                for priority in (Priority.LOW, Priority.VERY_HIGH, Priority.NORMAL, Priority.HIGH)]
        outsider = await board.post("webhook", priority=Priority.VERY_LOW)
        first, second = await board.claim_next("w"), await other.claim_next("w")
        claimed = {c.job.id: (by, c) for by, c in ((board, first), (other, second)) if c is not None}
        if self.claim_next_best_first:
            assert first is not None and first.job.id == jobs[0].id  # posting order, not priority
            assert second is not None and second.job.id == outsider.id
        assert set(claimed) == {jobs[0].id, outsider.id}  # declared otherwise: the two in either order
        assert await board.claim_next("w") is None
        await self.held_back(other, jobs[1], "sequence")
        claimer, head = claimed[jobs[0].id]
        await claimer.abandon(head)  # still the head: it runs again before the others
        again = await other.claim_next("w")
        assert again is not None and again.job.id == jobs[0].id
        await other.consume(again)
        nxt = await board.claim_next("w")
        assert nxt is not None and nxt.job.id == jobs[1].id
        await board.trash(nxt, "bad payload")  # the sequence goes on
        nxt = await other.claim_next("w")
        assert nxt is not None and nxt.job.id == jobs[2].id
        await other.cancel(jobs[3], "not wanted")
        await other.consume(nxt)
        assert await board.claim_next("w") is None and await self.running(board, "account-1") == (0, 0)

    @bounded
    async def test_a_rate_limit_counts_claims_and_tells_when_the_next_permit_is_due(
        self, open_boards: BoardOpener,
    ) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        period = 4 * self.delay_unit
        await board.set_limit("api", rate=(2, period))
        jobs = [await board.post("call", group="api") for _ in range(4)]
        started = anyio.current_time()
        first, second = await board.claim_next("w"), await other.claim_next("w")
        granted_within = anyio.current_time() - started  # the two grants came at most this far apart
        assert first is not None and second is not None
        await board.consume(first)  # a settle gives no rate permit back: claims are counted
        assert await other.claim_next("w") is None
        asked = anyio.current_time()
        due = (await self.held_back(board, jobs[2], "rate")).retry_after
        assert due is not None and 0 < due <= period
        # the permit comes due `due` after the backend read its clock, after `asked`: still this far off (a
        # loaded machine may have taken most of the period over the calls since the grants)
        quiet = min(period / 6, asked + due - anyio.current_time() - SLACK)
        assert quiet <= 0 or await waited(other, quiet) is None  # wait offers no job only the rate holds back ...
        woke = await waited(other, period + 5)  # ... and wakes when its next permit is due
        assert woke and {job.id for job in woke} <= {jobs[2].id, jobs[3].id}
        assert anyio.current_time() - started >= period - 0.05
        third = await other.claim_next("w")  # a new window: the first grant's permit ...
        assert third is not None and third.job.id == jobs[2].id
        fourth = await board.claim_next("w")  # ... and the second's, due as far after it as the grants were apart
        if fourth is None:  # refused; its permit may come due before the claim below (then granted)
            try:
                fourth = await board.claim(jobs[3], "w")
            except HeldBack as held:
                assert held.why == "rate" and held.retry_after is not None
                assert 0 < held.retry_after <= granted_within + 0.05
                assert await waited(board, period + 5)
                fourth = await board.claim_next("w")
        assert fourth is not None and fourth.job.id == jobs[3].id
        await board.post("call", group="api")
        assert await other.claim_next("w") is None

    @bounded
    async def test_pause_and_resume_a_name_and_the_board(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        running = await board.claim(await board.post("export"), "w")
        exports = [await board.post("export") for _ in range(2)]
        other_job = await board.post("resize", priority=Priority.LOW)
        await board.pause("export")
        assert (await other.paused()).names == frozenset({"export"})
        claimed = await other.claim_next("w")
        assert claimed is not None and claimed.job.id == other_job.id
        assert await other.claim_next("w") is None
        await self.held_back(other, exports[0], "paused")
        await board.consume(running)  # running jobs finish
        await other.resume("export")
        assert (await board.paused()).names == frozenset()
        resumed = await board.claim_next("w")
        assert resumed is not None and resumed.job.id == exports[0].id
        await other.pause()
        paused = await board.paused()
        assert paused.board and paused.covers("anything")
        assert await board.claim_next("w") is None
        with pytest.raises(HeldBack):
            await board.claim(exports[1], "w")
        await board.consume(resumed)
        await board.resume()
        last = await other.claim_next("w")
        assert last is not None and last.job.id == exports[1].id

    @bounded
    async def test_wait_offers_no_held_back_job_and_wakes_when_one_is_free(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        await board.post("work", group="g")
        waiting = await board.post("work", group="g")
        holder = await board.claim_next("w")
        assert holder is not None
        assert await waited(other, 0.2) is None
        woken: list[list[Job]] = []

        async def wait() -> None:
            woken.append(await other.wait())

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.1)
            assert woken == []
            await board.consume(holder)  # the permit returns: the waiter wakes
        assert [job.id for job in woken[0]] == [waiting.id]
        await board.pause("work")
        assert await waited(other, 0.2) is None
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.1)
            await board.resume("work")
        assert [job.id for job in woken[1]] == [waiting.id]
