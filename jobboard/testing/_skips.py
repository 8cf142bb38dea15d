"""Conformance: the claims flow control made ``claim_next`` / ``claim_many`` pass over, counted (issue 27).

``board.held_back`` counts each ``claim_next``, ``claim_many`` and claim of ``consume_and_claim_next`` that
passed over at least one job held back by flow control (better in the claim order than the job it took, or
any, taking none) once per call and ``why``: not once per job. A claim that passes nothing over counts
nothing. The cases run on a backend that reports it (``Backend.reports_held_back``) and skip elsewhere.
"""

from __future__ import annotations

from collections import Counter

import pytest

from jobboard.board.contract import JobBoard
from jobboard.job import Priority
from jobboard.testing._base import bounded
from jobboard.testing._limits import FlowControlBase


class SkipsConformance(FlowControlBase):
    def require_skips_reported(self, board: JobBoard) -> None:
        self.require_flow_control(board)
        if not board.backend.reports_held_back:
            pytest.skip(f"{type(board.backend).__name__} does not report the jobs its claim_next passes over")

    @staticmethod
    def counted(board: JobBoard) -> dict[str, int]:
        return {why: count for why, count in board.held_back.items() if count}

    @bounded
    async def test_a_group_at_its_limit_counts_once_per_claim_next(self, board: JobBoard) -> None:
        self.require_skips_reported(board)
        await board.set_limit("g", concurrency=1)
        first = await board.post("w", group="g")
        for _ in range(2):
            await board.post("w", group="g")
        taken = await board.claim_next("a")
        assert taken is not None and taken.job.id == first.id
        assert self.counted(board) == {}
        assert await board.claim_next("a") is None  # two jobs held back: counted once
        assert self.counted(board) == {"concurrency": 1}
        assert await board.claim_next("a") is None  # held back again (parked or not): once more
        assert self.counted(board) == {"concurrency": 2}
        plain = await board.post("w")
        later = await board.claim_next("a")  # g's jobs are better in the claim order than the plain job
        assert later is not None and later.job.id == plain.id
        assert self.counted(board) == {"concurrency": 3}
        await board.consume(later)
        assert await board.claim_next("a") is None
        assert self.counted(board) == {"concurrency": 4}

    @bounded
    async def test_claim_many_and_a_fused_claim_count_once_per_call(self, board: JobBoard) -> None:
        self.require_skips_reported(board)
        await board.set_limit("g", concurrency=1)
        for _ in range(3):
            await board.post("w", group="g")
        plain = [await board.post("w") for _ in range(3)]
        claims = await board.claim_many("a", 3)  # g's first, then two plain jobs past g's held-back two
        assert [claim.job.group for claim in claims] == ["g", None, None]
        assert self.counted(board) == {"concurrency": 1}
        [left] = {job.id for job in plain} - {claim.job.id for claim in claims}
        nxt = await board.consume_and_claim_next(claims[1])
        assert nxt is not None and nxt.job.id == left
        assert self.counted(board) == {"concurrency": 2}

    @bounded
    async def test_a_job_after_the_one_taken_is_not_passed_over(self, board: JobBoard) -> None:
        self.require_skips_reported(board)
        await board.set_limit("g", concurrency=1)
        await board.post("w", group="g")
        plain = await board.post("w")
        await board.post("w", group="g")
        await board.claim_next("a")  # g's first
        taken = await board.claim_next("a")  # the plain job, before g's second in the claim order
        assert taken is not None and taken.job.id == plain.id
        assert self.counted(board) == {}
        assert await board.claim_next("a") is None  # g's second held back (and parked, where a backend parks)
        assert self.counted(board) == {"concurrency": 1}
        urgent = await board.post("w", priority=Priority.HIGH)
        taken = await board.claim_next("a")  # better than g's second: nothing passed over
        assert taken is not None and taken.job.id == urgent.id
        assert self.counted(board) == {"concurrency": 1}

    @bounded
    async def test_a_rate_a_sequence_and_a_pause_count_as_their_why(self, board: JobBoard) -> None:
        self.require_skips_reported(board)
        await board.set_limit("r", rate=(1, 600.0))
        await board.set_limit("s", sequence=True)
        for group in ("r", "r", "s", "s"):
            await board.post("w", group=group)
        assert await board.claim_next("a") and await board.claim_next("a")  # r's first (its one grant), s's head
        assert self.counted(board) == {"rate": 1}  # s's head was taken past r's second
        assert await board.claim_next("a") is None
        assert self.counted(board) == {"rate": 2, "sequence": 1}
        await board.pause("p")
        await board.post("p")
        assert await board.claim_next("a", names=["p"]) is None
        assert self.counted(board) == {"rate": 2, "sequence": 1, "paused": 1}
        await board.pause()
        assert await board.claim_next("a") is None  # the whole board paused: its jobs are held back too
        assert self.counted(board)["paused"] == 2

    @bounded
    async def test_limits_that_do_not_bind_count_nothing(self, board: JobBoard) -> None:
        self.require_skips_reported(board)
        for _ in range(3):
            await board.post("w")
            await board.post("w", group="g")
        assert len(await board.claim_many("a", 2)) == 2
        assert await board.claim_next("a")
        assert self.counted(board) == {}
        await board.set_limit("g", concurrency=5)
        await board.pause("other")
        assert len(await board.claim_many("a", 2)) == 2
        assert await board.claim_next("a") and await board.claim_next("a") is None
        assert self.counted(board) == {}
        assert board.held_back == Counter()
