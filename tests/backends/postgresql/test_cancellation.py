"""Every write of a postgresql:// board cancelled at random points: the board's invariants hold at
each step, right after the cancelled call returned (not eventually).

The class of bug: a statement cut mid-flight by a cancel may still commit on the server, after the
caller was told nothing. The invariants, checked after every call, cancelled or not:

- every claimed job is held by a claim a caller received (same job, same owner: owners are unique
  per call), so a cancelled claim that lands later is seen at the next step;
- a claim is consumed at most once (a consume that returned, then another of the same job that
  returned too, is a lie);
- at the end, everything left is claimable: each job still on the board is claimed and consumed once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import AlreadyClaimed, ClaimLost, JobBoardError, JobNotFound, NotClaimable
from jobboard.job import Claim, JobState
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

SETTLE_ERRORS = (ClaimLost, JobNotFound, AlreadyClaimed, NotClaimable)


@pytest.fixture
async def board(postgresql_url: str) -> AsyncIterator[JobBoard]:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=cancel-{uuid.uuid4().hex}") as board:
        yield board


class Run:
    """The operations, what the caller received, and the checks."""

    def __init__(self, board: JobBoard, seed: int) -> None:
        self.board, self.rng = board, random.Random(seed)
        self.held: dict[str, Claim] = {}
        self.consumed: set[str] = set()
        self.uncertain: set[str] = set()
        """Jobs whose held claim had a settle cancelled: it may be stale (applied) or still current."""
        self.picked: Claim | None = None
        self.calls = 0

    def owner(self) -> str:
        self.calls += 1
        return f"w{self.calls}"

    async def step(self) -> None:
        """One random write under a random deadline (0 to 3 ms), then the invariants."""
        ops = [self.post, self.post, self.post_many, self.claim, self.claim_next, self.claim_next]
        if self.held:
            ops += [self.consume, self.consume, self.abandon, self.trash, self.consume_and_claim_next, self.cancel]
        op, delay = self.rng.choice(ops), self.rng.random() * 0.003
        self.picked, cancelled = None, True
        if self.rng.random() < 0.5:
            with anyio.move_on_after(delay):  # level-triggered: cancels every await until the scope exits
                await op()
                cancelled = False
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # edge-triggered: one cancel
                    await op()
                    cancelled = False
        if cancelled and self.picked is not None:
            self.uncertain.add(self.picked.job.id)  # a settle cut mid-flight: applied or not
        await self.check(op.__name__)

    async def post(self) -> None:
        await self.board.post("t", max_attempts=1000)

    async def post_many(self) -> None:
        await self.board.post_many([NewJob("t", {"i": i}) for i in range(3)])

    async def claim(self) -> None:
        jobs = [listed.job.id async for listed in self.board.listing(only_unclaimed=True)]
        if jobs:
            with contextlib.suppress(*SETTLE_ERRORS):
                self.received(await self.board.claim(self.rng.choice(jobs), self.owner()))

    async def claim_next(self) -> None:
        self.received(await self.board.claim_next(self.owner()))

    def received(self, claim: Claim | None) -> None:
        if claim is not None:
            assert claim.job.id not in self.held or claim.job.id in self.uncertain, f"job {claim.job.id} claimed twice"
            self.uncertain.discard(claim.job.id)
            self.held[claim.job.id] = claim

    def pick(self) -> Claim:
        self.picked = self.held[self.rng.choice(sorted(self.held))]
        return self.picked

    async def consume(self) -> None:
        claim = self.pick()
        with contextlib.suppress(ClaimLost):
            await self.board.consume(claim)
            self.consumed_once(claim)

    def consumed_once(self, claim: Claim) -> None:
        assert claim.job.id not in self.consumed, f"job {claim.job.id}: two consumes both reported applied"
        self.consumed.add(claim.job.id)
        self.held.pop(claim.job.id, None)

    async def consume_and_claim_next(self) -> None:
        claim = self.pick()
        with contextlib.suppress(ClaimLost):
            taken = await self.board.consume_and_claim_next(claim)
            self.consumed_once(claim)
            self.received(taken)

    async def abandon(self) -> None:
        claim = self.pick()
        with contextlib.suppress(ClaimLost):
            await self.board.abandon(claim)
            self.held.pop(claim.job.id, None)

    async def trash(self) -> None:
        claim = self.pick()
        with contextlib.suppress(ClaimLost):
            await self.board.trash(claim, "test")
            self.held.pop(claim.job.id, None)

    async def cancel(self) -> None:
        claim = self.pick()
        with contextlib.suppress(JobNotFound):
            await self.board.cancel(claim.job.id, "test")
            self.held.pop(claim.job.id, None)

    async def check(self, what: str) -> None:
        """Every claimed job is held by a claim a caller received (the same owner)."""
        async for listed in self.board.listing():
            if listed.state is not JobState.CLAIMED:
                continue
            claim = self.held.get(listed.job.id)
            assert claim is not None and claim.owner == listed.owner, (
                f"after {what} (call {self.calls}): job {listed.job.id} claimed by {listed.owner}, a claim no "
                f"caller holds (held: {claim.owner if claim else None})")
        for job_id in [job_id for job_id in self.held if job_id in self.consumed]:
            del self.held[job_id]

    async def drain(self) -> None:
        """Give back what is held; then every job left is claimable and is consumed once."""
        for held in list(self.held.values()):
            with contextlib.suppress(JobBoardError):
                await self.board.abandon(held)
        self.held.clear()
        while (claim := await self.board.claim_next("drain")) is not None:
            await self.board.consume(claim)
            self.consumed_once(claim)
        assert await self.board.job_count() == 0


@pytest.mark.parametrize("seed", range(3))
async def test_writes_cancelled_at_random_points_keep_the_invariants(board: JobBoard, seed: int) -> None:
    run = Run(board, seed)
    async with asyncio.timeout(60):
        for _ in range(300):
            await run.step()
        await run.drain()
    assert run.consumed, "nothing was consumed: the run exercised nothing"
