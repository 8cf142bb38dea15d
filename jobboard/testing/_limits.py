"""Conformance: a job's group, and concurrency limits per group (issue 27; the rules: jobboard.board.limits).

Every backend stores a job's group. The limit cases run on a backend that implements flow control
(``Backend.flow_control``) and skip on one that does not yet (or declares ``flow_control`` unsupported).
"""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.inputs import NewJob
from jobboard.errors import ClaimLost, HeldBack, InvalidJob, NotClaimable, Unsupported
from jobboard.job import Claim, Job, Priority
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed


class FlowControlBase(ConformanceBase):
    def require_flow_control(self, board: JobBoard) -> None:
        """Skip the case unless the backend implements flow control (then every case must pass)."""
        self.skip_if_unsupported("flow_control")
        if not board.backend.flow_control:
            pytest.skip(f"{type(board.backend).__name__} does not implement flow control yet")

    @staticmethod
    async def held_back(board: JobBoard, job: Job, why: str) -> HeldBack:
        """``board.claim(job)`` is refused with :class:`HeldBack` for ``why``: the error (its ``retry_after``)."""
        with pytest.raises(HeldBack) as held:
            await board.claim(job, "held")
        assert held.value.why == why, held.value
        return held.value

    @staticmethod
    async def running(board: JobBoard, group: str) -> tuple[int, int]:
        """``group``'s (running, waiting) as ``limits()`` lists them."""
        found = [(limit.running, limit.waiting) for limit in await board.limits() if limit.group == group]
        assert len(found) == 1, found
        return found[0]


class LimitsConformance(FlowControlBase):
    @bounded
    async def test_a_group_is_stored_and_read_back_on_every_backend(self, board: JobBoard) -> None:
        one = await board.post("a", group="tenant-42")
        two, three = await board.post_many([NewJob("b", group="tenant-7"), NewJob("c")])
        assert (one.group, two.group, three.group) == ("tenant-42", "tenant-7", None)
        assert (await board.get(one)).group == "tenant-42"
        assert {job.id: job.group for job in await listed(board)} == {one.id: "tenant-42", two.id: "tenant-7",
                                                                       three.id: None}
        claim = await board.claim(two, "w")
        assert claim.job.group == "tenant-7"
        with pytest.raises(InvalidJob, match="group"):
            await board.post("d", group="")
        with pytest.raises(InvalidJob, match=r"jobs\[0\].*group"):
            await board.post_many([NewJob("d", group="x" * 201)])

    @bounded
    async def test_without_flow_control_every_operation_is_unsupported(self, board: JobBoard) -> None:
        if board.backend.flow_control:
            pytest.skip("the backend implements flow control: the other cases check it")
        for call in (board.set_limit("g", concurrency=1), board.clear_limit("g"), board.limits(), board.pause(),
                     board.resume("a"), board.paused()):
            with pytest.raises(Unsupported):
                await call

    @bounded
    async def test_limits_are_checked_and_listed(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        assert await board.limits() == []
        for bad in ({}, {"concurrency": -1}, {"rate": "abc"}, {"sequence": True, "concurrency": 2}):
            with pytest.raises(InvalidJob):
                await board.set_limit("g", **bad)
        await board.set_limit("b", concurrency=2, rate=(20, 1.0))
        await board.set_limit("a", sequence=True)
        await board.post("x", group="b")
        listed_limits = await other.limits()  # stored on the board: every board reads it
        assert [(each.group, each.concurrency, each.sequence, each.running, each.waiting)
                for each in listed_limits] == [("a", None, True, 0, 0), ("b", 2, False, 0, 1)]
        assert (listed_limits[1].rate.count, listed_limits[1].rate.period) == (20, 1.0)  # type: ignore[union-attr]
        await other.set_limit("b", concurrency=1)  # replaces the whole limit
        assert [(each.concurrency, each.rate) for each in await board.limits() if each.group == "b"] == [(1, None)]
        assert await board.clear_limit("a") is True
        assert await board.clear_limit("a") is False
        assert [each.group for each in await other.limits()] == ["b"]

    @bounded
    async def test_claim_next_skips_a_full_group_for_another_groups_job(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("busy", concurrency=2)
        busy = [await board.post("work", group="busy", priority=Priority.HIGH) for _ in range(4)]
        calm = await board.post("work", group="calm")
        free = await board.post("work")
        claims = [(board, await board.claim_next("w1")), (other, await other.claim_next("w2")),
                  (other, await other.claim_next("w3")), (board, await board.claim_next("w4"))]
        ids = [c.job.id for _, c in claims if c is not None]
        if self.claim_next_best_first:
            assert ids == [busy[0].id, busy[1].id, calm.id, free.id]
        assert sorted(ids) == sorted([busy[0].id, busy[1].id, calm.id, free.id])  # declared: in any order
        assert await board.claim_next("w5") is None
        assert (await self.held_back(other, busy[2], "concurrency")).retry_after is None
        assert await self.running(board, "busy") == (2, 2)
        claimer, first = next((by, c) for by, c in claims if c is not None and c.job.id == busy[0].id)
        await claimer.consume(first)
        after = await other.claim_next("w7")
        assert after is not None and after.job.id == busy[2].id

    @bounded
    async def test_consume_and_claim_next_honours_the_limits(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        await board.set_limit("r", rate=(1, 60.0))
        held = await board.claim(await board.post("work", group="g", priority=Priority.HIGH), "a")
        waiting = await board.post("work", group="g", priority=Priority.HIGH)
        rated = [await board.post("work", group="r", priority=Priority.HIGH) for _ in range(2)]
        plain = await other.post("work")
        first = await other.claim(rated[0], "b")  # the rate's one grant in 60 s
        nxt = await other.consume_and_claim_next(first)  # g is full, r has no permit: the plain job
        assert nxt is not None and nxt.job.id == plain.id
        assert await other.consume_and_claim_next(nxt) is None
        after = await board.consume_and_claim_next(held)  # its consume gives the permit it takes again
        assert after is not None and after.job.id == waiting.id
        assert await self.running(other, "g") == (1, 0) and await self.running(other, "r") == (0, 1)

    @bounded
    async def test_many_claimers_at_the_last_permit_one_wins(self, open_boards: BoardOpener) -> None:
        boards = [await open_boards() for _ in range(4)]
        self.require_flow_control(boards[0])
        await boards[0].set_limit("g", concurrency=2)
        jobs = [await boards[0].post("work", group="g") for _ in range(10)]
        held = await boards[1].claim(jobs[0], "first")
        won: list[Claim] = []
        refused: list[str] = []

        async def by_claim_next(board: JobBoard, owner: str) -> None:
            claim = await board.claim_next(owner)
            if claim is not None:
                won.append(claim)

        async def by_claim(board: JobBoard, owner: str, job_id: str) -> None:
            try:
                won.append(await board.claim(job_id, owner))
            except NotClaimable:  # HeldBack, or AlreadyClaimed: claim_next took that job
                refused.append(owner)

        async with anyio.create_task_group() as group:
            for index in range(16):
                board = boards[index % 4]
                if index % 2:
                    group.start_soon(by_claim, board, f"c{index}", jobs[1 + index % 9].id)
                else:
                    group.start_soon(by_claim_next, board, f"n{index}")
        assert len(won) == 1, [c.job.id for c in won]  # the last permit, once
        assert await self.running(boards[2], "g") == (2, 8)
        await boards[1].consume(held)
        await boards[0].consume(won[0])
        assert await self.running(boards[3], "g") == (0, 8)

    @bounded
    async def test_a_permit_returns_whenever_its_claim_ends(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        jobs = [await board.post("work", group="g") for _ in range(5)]

        async def ended_by(end: str) -> None:
            holder = await open_boards() if end == "closed" else board
            claim = await holder.claim_next("holder")
            assert claim is not None
            assert await other.claim_next("other") is None, f"a second permit before the {end}"
            if end == "consume":
                await holder.consume(claim)
            elif end == "abandon":
                await holder.abandon(claim)
            elif end == "trash":
                await holder.trash(claim, "bad")
            elif end == "cancel":
                await other.cancel(claim.job, "no longer wanted")
            else:
                await holder.aclose()
            assert (await self.running(other, "g"))[0] == 0, f"the permit stayed after the {end}"

        for end in ("consume", "abandon", "trash", "cancel", "closed"):
            await ended_by(end)
        last = await other.claim_next("other")
        assert last is not None and last.job.id in {job.id for job in jobs}

    @bounded
    async def test_a_stale_holder_settling_changes_nothing(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        job, later = await board.post("work", group="g"), await board.post("work", group="g")
        stale = await board.claim(job, "old")
        await board.abandon(stale)  # the claim ends (as a lost one does): its permit returns
        current = await other.claim(job, "new")
        for settle in (board.consume(stale), board.abandon(stale), board.trash(stale, "late")):
            with pytest.raises(ClaimLost):
                await settle
        assert await self.running(board, "g") == (1, 1)
        assert await board.claim_next("third") is None  # the stale settles gave no permit back
        await other.cancel(later, "gone")
        with pytest.raises(ClaimLost):
            await board.consume(stale)
        assert await self.running(other, "g") == (1, 0)
        await other.consume(current)
        assert await board.limits() != [] and await self.running(board, "g") == (0, 0)

    @bounded
    async def test_a_limit_changes_at_run_time(self, open_boards: BoardOpener) -> None:
        board, other = await open_boards(), await open_boards()
        self.require_flow_control(board)
        await board.set_limit("g", concurrency=1)
        for _ in range(4):
            await board.post("work", group="g")
        first = await board.claim_next("w")
        assert first is not None and await board.claim_next("w") is None
        await other.set_limit("g", concurrency=2)
        second = await board.claim_next("w")
        assert second is not None and await board.claim_next("w") is None
        await other.set_limit("g", concurrency=1)  # lowered: running jobs go on, no new claim until under it
        await board.consume(first)
        assert await board.claim_next("w") is None
        await board.consume(second)
        third = await board.claim_next("w")
        assert third is not None
        await other.set_limit("g", concurrency=0)  # holds the group
        await board.abandon(third)
        assert await board.claim_next("w") is None
        assert await other.clear_limit("g") is True
        claims = [await board.claim_next("w") for _ in range(2)]
        assert all(claim is not None for claim in claims)
