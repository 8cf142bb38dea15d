"""Conformance: claim-ahead (``claim_many``) and giving back a claim never started (``release``).

``claim_many`` is what as many ``claim_next`` calls would claim, in their order, each its own fenced claim,
flow control checked job by job; every backend passes (the default loops ``claim_next``). ``release``
makes the job claimable at once; a backend that implements it (``releases_uncounted``) uncounts the attempt,
and a worker refuses ``prefetch`` on one that does not. ``claim_lost`` says why a claim is not current.
"""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, InvalidJob, Unsupported
from jobboard.job import JobState, Priority
from jobboard.testing._base import BoardOpener, bounded, listed, listed_ids
from jobboard.testing._limits import FlowControlBase
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import JobContext


async def nothing(ctx: JobContext) -> None:
    """A handler that is never run."""


class PrefetchConformance(FlowControlBase):
    def same_order(self, got: list[str], expected: list[str]) -> None:
        """``got`` is ``expected`` (in any order where the backend declares claim_next not best-first)."""
        assert got == expected if self.claim_next_best_first else sorted(got) == sorted(expected), (got, expected)

    @bounded
    async def test_claim_many_takes_the_best_jobs_in_priority_then_age_order(self, board: JobBoard) -> None:
        low = await board.post("a", priority=Priority.LOW)
        old, young = await board.post("a"), await board.post("a")
        high = await board.post("a", priority=Priority.HIGH)
        other = await board.post("b", priority=Priority.VERY_HIGH)
        claims = await board.claim_many("w", 3, names=["a"])
        self.same_order([claim.job.id for claim in claims], [high.id, old.id, young.id])
        assert {claim.owner for claim in claims} == {"w"}
        for claim in claims:
            assert await board.owner(claim.job) == "w" and claim.job.attempts == 1
        rest = await board.claim_many("w2", 5)
        self.same_order([claim.job.id for claim in rest], [other.id, low.id])
        assert await board.claim_many("w3", 2) == []
        assert await board.claim_many("w3", 2, names=[]) == []

    @bounded
    async def test_each_claim_made_ahead_is_its_own_fenced_claim(self, board: JobBoard) -> None:
        jobs = [await board.post("a", keep_result=True) for _ in range(3)]
        claims = await board.claim_many("w", 3)
        assert sorted(claim.job.id for claim in claims) == sorted(job.id for job in jobs)
        await board.consume(claims[1], "done")
        with pytest.raises(ClaimLost):
            await board.consume(claims[1])
        await board.abandon(claims[0])
        again = await board.claim_next("w2")
        assert again is not None and again.job.id == claims[0].job.id and again.generation > claims[0].generation
        with pytest.raises(ClaimLost):
            await board.consume(claims[0])
        await board.consume(claims[2])
        assert await board.state(claims[1].job) is JobState.COMPLETE
        assert await board.job_count() == 1
        with pytest.raises(InvalidJob, match="count"):
            await board.claim_many("w", 0)

    @bounded
    async def test_claim_many_respects_concurrency_rate_and_pauses(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("one", concurrency=1)
        await board.set_limit("rated", rate=(2, 60.0))
        ones = [await board.post("work", group="one", priority=Priority.HIGH) for _ in range(3)]
        rated = [await board.post("work", group="rated", priority=Priority.HIGH) for _ in range(3)]
        await board.pause("quiet")
        quiet = await board.post("quiet", priority=Priority.VERY_HIGH)
        plain = await board.post("work")
        claims = await other.claim_many("w", 10)
        got = [claim.job.id for claim in claims]
        assert sorted(got) == sorted([ones[0].id, rated[0].id, rated[1].id, plain.id]), got
        assert quiet.id not in got
        assert await other.claim_many("w", 10) == []
        assert await self.running(board, "one") == (1, 2) and await self.running(board, "rated") == (2, 1)
        await board.resume("quiet")
        after = await other.claim_many("w", 10)
        assert [claim.job.id for claim in after] == [quiet.id]

    @bounded
    async def test_a_released_claim_is_claimable_at_once(self, board: JobBoard) -> None:
        job = await board.post("a", max_attempts=1)
        await board.post("a")
        claims = await board.claim_many("w", 2)
        held = next(claim for claim in claims if claim.job.id == job.id)
        await board.release(held)
        with pytest.raises(ClaimLost):
            await board.consume(held)
        assert job.id in await listed_ids(board, only_unclaimed=True)
        if not board.releases_uncounted:  # an abandon: the attempt stays counted, so a worker refuses prefetch
            assert (await board.get(job)).attempts == 1
            with pytest.raises(Unsupported, match="prefetch"):
                Worker(board, nothing, WorkerConfig(prefetch=1))
            return
        assert (await board.get(job)).attempts == 0
        again = await board.claim(job, "w2")  # not trashed for its max_attempts=1
        assert again.job.attempts == 1
        await board.consume(again)

    @bounded
    async def test_claim_lost_says_why_a_claim_is_not_current(self, board: JobBoard) -> None:
        """``Backend.claim_lost`` (a worker checks a claim it held ahead before starting it): ``None`` for a
        current claim; a reason once it was cancelled, consumed, released or claimed again by another owner,
        and, where a worker may hold claims ahead (``releases_uncounted``), by the same one (its other claimer
        after the claim was given back: only the generation tells; the interface's default reads state and
        owner)."""
        jobs = [await board.post("a") for _ in range(5)]
        claims = {claim.job.id: claim for claim in await board.claim_many("w", 5)}
        cancelled, consumed, released, again, same = (claims[job.id] for job in jobs)
        assert [await board.backend.claim_lost(claim) for claim in claims.values()] == [None] * 5
        await board.cancel(cancelled.job, "not wanted")
        await board.consume(consumed)
        await board.release(released)
        await board.abandon(again)
        assert (await board.claim(again.job, "w2")).generation > again.generation
        await board.abandon(same)
        assert (await board.claim(same.job, "w")).generation > same.generation
        for claim in (cancelled, consumed, released, again, *([same] if board.releases_uncounted else [])):
            assert await board.backend.claim_lost(claim) is not None, claim.job.id

    @bounded
    async def test_a_cancelled_claim_many_leaves_no_job_claimed(self, board: JobBoard) -> None:
        """Cancelled at any point (a timeout, a shutdown), ``claim_many`` returned its claims or left every job
        it claimed claimable: none stays behind a claim no caller holds."""
        for _ in range(3):
            await board.post("a", max_attempts=1000)
        for step in range(30):  # cancelled after 0 to 6 ms: before, during and after one round trip
            claims = []
            with anyio.move_on_after(step * 0.0002):
                claims = await board.claim_many("w", 3)
            for claim in claims:
                await board.abandon(claim)
            for _ in range(200):  # a backend may release them in the background: 2 s at most
                if {await board.owner(job) for job in await listed(board)} == {None}:
                    break
                await anyio.sleep(0.01)
            else:
                pytest.fail(f"claim_many cancelled after {step * 0.2:.1f} ms left a job claimed by no caller")
        assert len(await board.claim_many("w", 5)) == 3  # claimable again, not merely unowned
