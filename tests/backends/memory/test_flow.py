"""memory://'s flow control from the inside: the permit count always equals the live claims of each group,
whatever ends them, and a held-back job parked out of the ready heap comes back when it is freed."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, HeldBack, JobBoardError
from jobboard.job import Claim
from jobboard_memory import MemoryBoard
from jobboard_memory.store import Store

GROUPS = ("a", "b", "c", None)
LIMITS = {"a": 1, "b": 2}
HIGHEST = {"a": 1, "b": 3, "c": 1}
"""The most claims of each group at once: its concurrency (b's changes to 1, 2 or 3), a sequence's one."""


def live_claims(store: Store) -> Counter[str]:
    return Counter(entry.posting.group for entry in store.jobs.values()
                   if entry.owner is not None and entry.posting.group is not None)


class RandomRun:
    """Random posts, claims, settles, cancels, stale settles, closed boards and limit changes on three boards."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.url = f"memory://flow-{uuid.uuid4().hex}"
        self.boards: list[JobBoard] = []
        self.claims: list[tuple[JobBoard, Claim]] = []
        self.refused = 0

    async def open(self) -> Store:
        self.boards = [await MemoryBoard(self.url).__aenter__() for _ in range(3)]
        for group, limit in LIMITS.items():
            await self.boards[0].set_limit(group, concurrency=limit)
        await self.boards[0].set_limit("c", sequence=True)
        store: Store = self.boards[0].backend._store  # type: ignore[attr-defined]
        return store

    async def step(self, step: int, store: Store) -> None:
        board, action = self.rng.choice(self.boards), self.rng.random()
        if action < 0.3:
            await board.post("work", group=self.rng.choice(GROUPS))
        elif action < 0.55:
            claim = await board.claim_next(f"w{step}")
            if claim is not None:
                self.claims.append((board, claim))
        elif action < 0.85 and self.claims:
            await self.settle(board)
        elif action < 0.9:
            closing = self.rng.choice(self.boards)
            await closing.aclose()  # its claims are released: their permits come back
            self.claims = [(holder, claim) for holder, claim in self.claims if holder is not closing]
            self.boards[self.boards.index(closing)] = await MemoryBoard(self.url).__aenter__()
        elif action < 0.95:
            job = self.rng.choice([entry.job_id for entry in store.jobs.values()] or ["none"])
            self.claims.append((board, await board.claim(job, f"d{step}")))
        else:
            await board.set_limit("b", concurrency=self.rng.choice((1, 2, 3)))

    async def settle(self, board: JobBoard) -> None:
        holder, claim = self.claims.pop(self.rng.randrange(len(self.claims)))
        settle = self.rng.choice(("consume", "abandon", "trash", "cancel", "stale"))
        if settle == "cancel":
            await board.cancel(claim.job, "cancelled")
        elif settle == "stale":
            await holder.abandon(claim)
            with pytest.raises(ClaimLost):
                await holder.consume(claim)
        elif settle == "trash":
            await holder.trash(claim, "bad")
        else:
            await getattr(holder, settle)(claim)


@pytest.mark.parametrize("seed", range(6))
async def test_permits_are_the_live_claims_through_random_operations(seed: int) -> None:
    run = RandomRun(seed)
    with anyio.fail_after(20):
        store = await run.open()
        for step in range(400):
            try:
                await run.step(step, store)
            except HeldBack:
                run.refused += 1
            except JobBoardError:  # a claim of a claimed or gone job
                pass
            live = live_claims(store)
            assert +store.flow.running == +live, f"step {step}"
            assert all(running <= HIGHEST[group] for group, running in live.items()), (step, live)
        assert run.refused > 0
        for board in run.boards:
            await board.aclose()


async def test_a_parked_job_comes_back_when_its_group_is_freed() -> None:
    async with MemoryBoard(f"memory://{uuid.uuid4().hex}") as board:
        await board.set_limit("g", concurrency=1)
        jobs = [await board.post("work", group="g") for _ in range(3)]
        holder = await board.claim_next("w")
        assert holder is not None and await board.claim_next("w") is None
        store = board.backend._store
        assert {item[2] for item in store._ready} == set()  # both parked: no heap item looked at again
        await board.consume(holder)
        nxt = await board.claim_next("w")
        assert nxt is not None and nxt.job.id == jobs[1].id
        await board.clear_limit("g")
        last = await board.claim_next("w")
        assert last is not None and last.job.id == jobs[2].id


async def test_a_requeued_job_goes_back_to_the_head_of_its_sequence() -> None:
    async with MemoryBoard(f"memory://{uuid.uuid4().hex}") as board:
        await board.set_limit("s", sequence=True)
        jobs = [await board.post("work", group="s") for _ in range(3)]
        first = await board.claim_next("w")
        assert first is not None and first.job.id == jobs[0].id
        await board.trash(first, "bad")
        second = await board.claim_next("w")
        assert second is not None and second.job.id == jobs[1].id
        await board.requeue(jobs[0])  # its old place: ahead of the third, behind nothing
        assert await board.claim_next("w") is None  # the second still runs
        with pytest.raises(HeldBack):
            await board.claim(jobs[2], "w")
        await board.consume(second)
        again = await board.claim_next("w")
        assert again is not None and again.job.id == jobs[0].id
        await board.consume(again)
        last = await board.claim_next("w")
        assert last is not None and last.job.id == jobs[2].id


async def test_grants_stay_counted_when_a_rate_is_cleared_and_set_again() -> None:
    async with MemoryBoard(f"memory://{uuid.uuid4().hex}") as board:
        await board.set_limit("r", rate=(2, 30.0))
        for _ in range(3):
            await board.post("work", group="r")
        assert [await board.claim_next("w") is not None for _ in range(3)] == [True, True, False]
        await board.clear_limit("r")
        await board.set_limit("r", rate=(2, 30.0))
        assert await board.claim_next("w") is None  # no window of 30 s holds a third grant
