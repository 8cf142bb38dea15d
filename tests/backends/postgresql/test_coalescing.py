"""postgresql:// claim coalescing: concurrent claims and consumes of one process share statements.

What must hold whatever the batching: no more jobs claimed than callers asked for (nothing hoarded),
the best jobs taken, each consume fenced by its own claim (one stale claim in a batch fails alone), and
a caller cancelled at any point leaves no job claimed by no one and no job consumed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, NotOwner
from jobboard.job import Claim, JobState
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def board(postgresql_url: str) -> AsyncIterator[JobBoard]:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=coalesce-{uuid.uuid4().hex}") as board:
        yield board


def statements(board: JobBoard) -> int:
    backend = board.backend
    assert isinstance(backend, PostgresBackend)
    return backend.claiming.coalescer.statements


async def claimed_on_server(board: JobBoard) -> dict[str, str | None]:
    return {listed.job.id: listed.owner async for listed in board.listing() if listed.state is JobState.CLAIMED}


async def test_concurrent_claims_share_statements_and_take_no_more_jobs_than_callers(board: JobBoard) -> None:
    jobs = await board.post_many([NewJob("t", priority="high" if n < 3 else "normal") for n in range(5)])
    async with asyncio.timeout(30):
        before = statements(board)
        claims = await asyncio.gather(*(board.claim_next(f"w{n}") for n in range(16)))
        sent = statements(board) - before
    taken = [claim for claim in claims if claim is not None]
    assert sorted(c.job.id for c in taken) == sorted(job.id for job in jobs), "each job claimed once, all taken"
    assert sent < 16, f"16 concurrent claims took {sent} statements: nothing was coalesced"
    assert await claimed_on_server(board) == {c.job.id: c.owner for c in taken}, "a job claimed for nobody"

    async with asyncio.timeout(30):  # 3 claimers, 5 jobs: the 3 best (the high ones), 2 left ready
        for claim in taken:
            await board.consume(claim)
        more = await board.post_many([NewJob("t", priority="high" if n < 3 else "normal") for n in range(5)])
        three = await asyncio.gather(*(board.claim_next(f"x{n}") for n in range(3)))
    assert sorted(c.job.id for c in three if c is not None) == sorted(job.id for job in more[:3])
    assert len(await claimed_on_server(board)) == 3


async def test_each_consume_of_a_batch_is_fenced_by_its_own_claim(board: JobBoard) -> None:
    await board.post_many([NewJob("t", {"n": n}) for n in range(6)])
    async with asyncio.timeout(30):
        claims = [c for c in await asyncio.gather(*(board.claim_next(f"w{n}") for n in range(6))) if c is not None]
        assert len(claims) == 6
        stale = claims[1]
        await board.abandon(stale)
        again = await board.claim(stale.job.id, "other")  # the stale claim's generation is old now
        foreign = dataclasses.replace(claims[2], owner="intruder")
        before = statements(board)
        outcomes = await asyncio.gather(*(board.consume(c) for c in [claims[0], stale, foreign, *claims[3:]]),
                                        return_exceptions=True)
        sent = statements(board) - before
    assert isinstance(outcomes[1], ClaimLost) and isinstance(outcomes[2], NotOwner), outcomes
    assert [o for n, o in enumerate(outcomes) if n not in (1, 2)] == [None] * 4, outcomes
    assert sent < 6, f"6 concurrent consumes took {sent} statements"
    assert await claimed_on_server(board) == {again.job.id: "other", claims[2].job.id: "w2"}


async def test_fused_consumes_claim_only_for_the_applied_ones(board: JobBoard) -> None:
    await board.post_many([NewJob("t", {"n": n}) for n in range(10)])
    async with asyncio.timeout(30):
        claims = [c for c in await asyncio.gather(*(board.claim_next(f"w{n}") for n in range(4))) if c is not None]
        stale = claims[0]
        await board.abandon(stale)
        again = await board.claim(stale.job.id, "other")
        outcomes = await asyncio.gather(*(board.consume_and_claim_next(c) for c in claims), return_exceptions=True)
    assert isinstance(outcomes[0], ClaimLost), outcomes
    nexts = [o for o in outcomes[1:] if isinstance(o, Claim)]
    assert len(nexts) == 3 and [n.owner for n in nexts] == ["w1", "w2", "w3"], outcomes
    assert await claimed_on_server(board) == {again.job.id: "other", **{n.job.id: n.owner for n in nexts}}
    assert await board.job_count() == 10 - 3


class Claimers:
    """W claimers looping claim_next / consume_and_claim_next / consume, each call cancelled at random."""

    def __init__(self, board: JobBoard, seed: int) -> None:
        self.board, self.rng = board, random.Random(seed)
        self.held: dict[str, Claim] = {}
        self.consumed: set[str] = set()
        self.uncertain: set[str] = set()
        self.calls = 0

    def received(self, claim: Claim | None) -> None:
        if claim is not None:
            assert claim.job.id not in self.held, f"job {claim.job.id} handed to two callers"
            self.held[claim.job.id] = claim

    def applied(self, claim: Claim) -> None:
        assert claim.job.id not in self.consumed, f"job {claim.job.id}: two consumes both reported applied"
        self.consumed.add(claim.job.id)
        self.held.pop(claim.job.id, None)

    async def one(self) -> None:
        mine: Claim | None = None
        for _ in range(40):
            self.calls += 1
            owner, settling, cut = f"w{self.calls}", mine, self.rng.random() < 0.3
            mine = None
            with anyio.move_on_after(self.rng.random() * 0.003 if cut else 30) as scope:
                if settling is None:
                    mine = await self.board.claim_next(owner)
                    self.received(mine)
                elif self.rng.random() < 0.5:
                    with contextlib.suppress(ClaimLost):
                        mine = await self.board.consume_and_claim_next(settling)
                        self.applied(settling)
                        self.received(mine)
                else:
                    with contextlib.suppress(ClaimLost):
                        await self.board.consume(settling)
                        self.applied(settling)
            if scope.cancelled_caught and settling is not None:
                self.uncertain.add(settling.job.id)  # a consume cut mid-flight: applied or not

    async def check_then_drain(self) -> None:
        on_server = await claimed_on_server(self.board)
        for job_id, owner in on_server.items():
            held = self.held.get(job_id)
            assert held is not None and held.owner == owner, f"job {job_id} claimed by {owner}, which no caller got"
        for claim in list(self.held.values()):
            with contextlib.suppress(ClaimLost):
                await self.board.consume(claim)
                if claim.job.id not in self.consumed:
                    self.applied(claim)
        while (left := await self.board.claim_next("drain")) is not None:
            await self.board.consume(left)
            self.applied(left)
        assert await self.board.job_count() == 0


@pytest.mark.parametrize("seed", range(2))
async def test_concurrent_claimers_cancelled_at_random_leave_no_orphan_claim(board: JobBoard, seed: int) -> None:
    await board.post_many([NewJob("t", {"n": n}, max_attempts=1000) for n in range(300)])
    run = Claimers(board, seed)
    async with asyncio.timeout(60):
        await asyncio.gather(*(run.one() for _ in range(16)))
        await run.check_then_drain()
    assert len(run.consumed - run.uncertain) > 50, "too few consumes: the run exercised little"
    assert statements(board) < run.calls, "nothing was coalesced"


async def test_a_job_named_twice_or_gone_in_a_batch_is_consumed_once(board: JobBoard) -> None:
    await board.post_many([NewJob("t", {"n": n}) for n in range(4)])
    async with asyncio.timeout(30):
        claims = [c for c in await asyncio.gather(*(board.claim_next(f"w{n}") for n in range(4))) if c is not None]
        await board.consume(claims[0])  # gone before the batch
        before = statements(board)
        outcomes = await asyncio.gather(board.consume(claims[0]), board.consume(claims[1]), board.consume(claims[1]),
                                        board.consume_and_claim_next(claims[2]), board.consume(claims[2]),
                                        return_exceptions=True)
        sent = statements(board) - before
    assert sent == 1, f"5 concurrent consumes took {sent} statements"
    assert isinstance(outcomes[0], ClaimLost), outcomes
    assert outcomes[1] is None and isinstance(outcomes[2], ClaimLost), outcomes
    assert outcomes[3] is None and isinstance(outcomes[4], ClaimLost), outcomes  # board empty: nothing claimed
    assert await board.job_count() == 1 and await claimed_on_server(board) == {claims[3].job.id: "w3"}
