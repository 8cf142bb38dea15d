"""Conformance: claiming, fencing, settling, attempts."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import AlreadyClaimed, ClaimLost, InvalidJob, JobNotFound, NotClaimable, NotOwner
from jobboard.job import Claim, JobState, Priority
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed, listed_ids


class ClaimsConformance(ConformanceBase):
    @bounded
    async def test_claim_counts_an_attempt(self, board: JobBoard) -> None:
        job = await board.post("a")
        claim = await board.claim(job, "w1")
        assert (claim.owner, claim.job.id, claim.attempt) == ("w1", job.id, 1)
        assert (await board.get(job)).attempts == 1

    @bounded
    async def test_double_claim_refused(self, open_boards: BoardOpener) -> None:
        first, second = await open_boards(), await open_boards()
        job = await first.post("a")
        await first.claim(job, "w1")
        with pytest.raises(AlreadyClaimed):
            await second.claim(job, "w2")
        with pytest.raises(AlreadyClaimed):
            await first.claim(job, "w1")
        assert await first.owner(job) == "w1"

    @bounded
    async def test_fifty_concurrent_claimers_one_winner(self, open_boards: BoardOpener) -> None:
        boards = [await open_boards() for _ in range(5)]
        job = await boards[0].post("contended")
        winners: list[Claim] = []
        losers: list[str] = []

        async def contend(board: JobBoard, owner: str) -> None:
            try:
                winners.append(await board.claim(job, owner))
            except AlreadyClaimed:
                losers.append(owner)

        async with anyio.create_task_group() as group:
            for index in range(50):
                group.start_soon(contend, boards[index % 5], f"w{index}")
        assert len(winners) == 1 and len(losers) == 49
        assert await boards[1].owner(job) == winners[0].owner

    @bounded
    async def test_claim_unknown_job(self, board: JobBoard) -> None:
        with pytest.raises(JobNotFound):
            await board.claim("job-that-does-not-exist", "w1")

    @bounded
    async def test_settle_by_non_owner_refused(self, board: JobBoard) -> None:
        job = await board.post("a")
        claim = await board.claim(job, "w1")
        forged = dataclasses.replace(claim, owner="intruder")
        for settle in (board.consume(forged), board.abandon(forged), board.trash(forged, "no")):
            with pytest.raises(NotOwner):
                await settle
        assert await board.owner(job) == "w1"

    @bounded
    async def test_generation_increases_with_every_claim(self, board: JobBoard) -> None:
        job = await board.post("a")
        generations = []
        for _ in range(3):
            claim = await board.claim(job, "w1")
            generations.append(claim.generation)
            await board.abandon(claim)
        assert generations == sorted(set(generations)) and len(generations) == 3

    @bounded
    async def test_stale_generation_is_claim_lost(self, open_boards: BoardOpener) -> None:
        first, second = await open_boards(), await open_boards()
        job = await first.post("a")
        stale = await first.claim(job, "w1")
        await first.abandon(stale)
        current = await second.claim(job, "w1")
        for settle in (first.consume(stale), first.abandon(stale), first.trash(stale, "x")):
            with pytest.raises(ClaimLost):
                await settle
        assert await first.state(job) is JobState.CLAIMED
        await second.consume(current, "ok")
        assert await first.state(job) is JobState.COMPLETE

    @bounded
    async def test_abandon_makes_it_claimable_again(self, board: JobBoard) -> None:
        job = await board.post("a")
        await board.abandon(await board.claim(job, "w1"))
        assert await board.state(job) is JobState.UNCLAIMED
        assert await listed_ids(board, only_unclaimed=True) == [job.id]
        claim = await board.claim_next("w2")
        assert claim is not None and claim.job.id == job.id and claim.attempt == 2

    @bounded
    async def test_claim_next_passes_over_a_job_claimed_by_id_until_it_is_abandoned(self, board: JobBoard) -> None:
        first, second = await board.post("a"), await board.post("b")
        taken = await board.claim(first, "w1")
        claim = await board.claim_next("w2")
        assert claim is not None and claim.job.id == second.id
        assert await board.claim_next("w2") is None
        await board.abandon(taken)
        again = await board.claim_next("w2")
        assert again is not None and (again.job.id, again.attempt) == (first.id, 2)

    @bounded
    async def test_retry_after_delays_the_next_claim(self, board: JobBoard) -> None:
        job = await board.post("a")
        await board.abandon(await board.claim(job, "w1"), retry_after=self.delay_unit)
        assert await board.claim_next("w2") is None
        with pytest.raises(NotClaimable):
            await board.claim(job, "w2")
        await anyio.sleep(self.delay_unit * 1.5)
        claim = await board.claim_next("w2")
        assert claim is not None and claim.job.id == job.id

    @bounded
    async def test_negative_retry_after_refused(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        with pytest.raises(InvalidJob):
            await board.abandon(claim, retry_after=-1)
        assert await board.owner(claim.job) == "w1"

    @bounded
    async def test_trash_keeps_the_reason(self, board: JobBoard) -> None:
        job = await board.post("a", {"k": 1})
        await board.trash(await board.claim(job, "w1"), "bad input")
        assert await board.state(job) is JobState.TRASHED
        assert await board.job_count() == 0
        trashed = [item async for item in board.trashed()]
        assert [(t.job.id, t.reason, dict(t.job.details)) for t in trashed] == [(job.id, "bad input", {"k": 1})]

    @bounded
    async def test_consume_twice_is_claim_lost(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        await board.consume(claim)
        with pytest.raises(ClaimLost):
            await board.consume(claim)
        assert await board.job_count() == 0

    @bounded
    async def test_unencodable_result_keeps_the_claim(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        with pytest.raises(InvalidJob, match="result"):
            await board.consume(claim, object())
        assert await board.owner(claim.job) == "w1"
        await board.consume(claim, {"fine": True})

    @bounded
    async def test_oversized_result_keeps_the_claim(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a", keep_result=True), "w1")
        await board.post("linked", depends_on=[claim.job])
        with pytest.raises(InvalidJob, match=rf"result of job {re.escape(claim.job.id)} .*{board.max_posting_bytes}"):
            await board.consume(claim, b"x" * (board.max_posting_bytes + 1))
        assert await board.owner(claim.job) == "w1"
        await board.consume(claim, b"small")

    @bounded
    async def test_only_unclaimed_listing_keeps_board_order(self, board: JobBoard) -> None:
        low = await board.post("low", priority=Priority.LOW)
        taken = await board.post("taken", priority=Priority.VERY_HIGH)
        first, second = await board.post("n1"), await board.post("n2")
        high = await board.post("high", priority=Priority.HIGH)
        await board.claim(taken, "w1")
        assert await listed_ids(board, only_unclaimed=True) == [high.id, first.id, second.id, low.id]

    @bounded
    async def test_claim_next_takes_priority_then_age(self, board: JobBoard) -> None:
        normal = await board.post("normal")
        high_first = await board.post("h1", priority=Priority.HIGH)
        high_second = await board.post("h2", priority=Priority.HIGH)
        order = []
        while (claim := await board.claim_next("w1")) is not None:
            order.append(claim.job.id)
        assert order == [high_first.id, high_second.id, normal.id]

    @bounded
    async def test_concurrent_claim_next_hands_out_distinct_jobs(self, open_boards: BoardOpener) -> None:
        boards = [await open_boards() for _ in range(4)]
        posted = {(await boards[0].post("j", {"i": i})).id for i in range(20)}
        claimed: list[str] = []

        async def drain(board: JobBoard, owner: str) -> None:
            while (claim := await board.claim_next(owner)) is not None:
                claimed.append(claim.job.id)
                await board.consume(claim)

        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(drain, boards[index % 4], f"w{index}")
        assert sorted(claimed) == sorted(posted)
        assert await boards[0].job_count() == 0

    @bounded
    async def test_max_attempts_moves_the_job_to_the_trash(self, board: JobBoard) -> None:
        job = await board.post("flaky", max_attempts=2)
        for _ in range(2):
            await board.abandon(await board.claim(job, "w1"))
        with pytest.raises(JobNotFound):
            await board.claim(job, "w1")
        assert await board.state(job) is JobState.TRASHED
        reasons = [t.reason async for t in board.trashed()]
        assert len(reasons) == 1 and "max attempts exceeded" in reasons[0]

    @bounded
    async def test_claim_next_skips_exhausted_jobs(self, board: JobBoard) -> None:
        exhausted = await board.post("flaky", max_attempts=1, priority=Priority.HIGH)
        fine = await board.post("fine")
        await board.abandon(await board.claim(exhausted, "w1"))
        claim = await board.claim_next("w1")
        assert claim is not None and claim.job.id == fine.id
        assert await board.state(exhausted) is JobState.TRASHED

    @bounded
    async def test_closing_a_board_releases_its_claims(self, open_boards: BoardOpener) -> None:
        owner_board, other = await open_boards(), await open_boards()
        job = await owner_board.post("a")
        claim = await owner_board.claim(job, "w1")
        await owner_board.aclose()
        assert await other.state(job) is JobState.UNCLAIMED
        taken = await other.claim(job, "w2")
        assert taken.generation > claim.generation and taken.attempt == 2
        assert [j.id for j in await listed(other)] == [job.id]

    @bounded
    async def test_a_cancelled_claim_leaves_no_job_claimed(self, board: JobBoard) -> None:
        """``claim``, ``claim_next`` or ``consume_and_claim_next`` cancelled at any point (a timeout,
        a shutdown) either returned its claim or left the job claimable: no job stays behind a claim
        that no caller holds."""
        job = await board.post("b", max_attempts=1000)
        returned = 0
        for call in ("claim", "claim_next", "consume_and_claim_next"):
            for step in range(30):  # cancelled after 0 to 6 ms: before, during and after one round trip
                done = await board.claim(await board.post("a"), "w") if call == "consume_and_claim_next" else None
                claim = None
                with anyio.move_on_after(step * 0.0002):
                    if done is not None:
                        claim = await board.consume_and_claim_next(done, names=["b"])
                    else:
                        claim = await (board.claim(job, "w") if call == "claim" else board.claim_next("w"))
                if done is not None:
                    with contextlib.suppress(ClaimLost):
                        await board.consume(done)  # unless the cancelled call did
                if claim is not None:
                    returned += 1
                    await board.abandon(claim)
                    continue
                for _ in range(200):  # a backend may release it in the background: 2 s at most
                    if await board.owner(job) is None:
                        break
                    await anyio.sleep(0.01)
                else:
                    pytest.fail(f"{call} cancelled after {step * 0.2:.1f} ms left job {job.id} claimed by no caller")
            again = await board.claim_next("w", names=["b"])  # claimable again, not merely unowned
            assert again is not None and again.job.id == job.id
            returned += 1
            assert again.attempt == returned, "a claim no caller received counted an attempt"
            await board.abandon(again)
