"""sqlite://'s write turn (jobboard_sqlite.calls): calls queued while another process holds it run in one
turn, a queued call whose caller is cancelled never runs, a holder that never gives the turn back (a stopped
process) does not stop the other writers, and the batch paths of ``post_many``."""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.errors import DependencyMissing
from jobboard_sqlite.calls import TURN_PATIENCE

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def turn_held(db: Path) -> AsyncIterator[None]:
    """Hold the file's write turn as another process would (another open file, same lock), once the board
    of this process gave it back (the loop must not block on it)."""
    fd = os.open(f"{db}-jobboard/write.turn", os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await anyio.sleep(0.001)
        yield
    finally:
        os.close(fd)


async def test_writes_queued_behind_another_holder_run_together_in_one_turn(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{db}?board=t") as board:
        calls = board.backend.db.calls  # type: ignore[attr-defined]
        calls.patience = 60.0  # this test waits for the turn, however slow the machine
        posted: list[str] = []

        async def post(index: int) -> None:
            posted.append((await board.post("j", {"i": index})).id)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group, turn_held(db):
                for index in range(8):
                    group.start_soon(post, index)
                await anyio.sleep(0.05)
                assert posted == [] and len(calls._queue) == 8  # all wait for the turn, none has written
                turns = calls.turns
        assert sorted(posted) == posted and len(posted) == 8
        assert calls.turns - turns == 1  # the eight writes ran in the one turn the board got
        assert await board.job_count() == 8


async def test_a_queued_claim_whose_caller_is_cancelled_never_runs(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{db}?board=t") as board:
        board.backend.db.calls.patience = 60.0  # type: ignore[attr-defined]
        job = await board.post("j")
        async with turn_held(db):
            with anyio.move_on_after(0.1):
                await board.claim_next("cancelled")
        with anyio.fail_after(20):
            assert await board.owner(job) is None
            claim = await board.claim_next("next")
        assert claim is not None and claim.job.id == job.id and claim.job.attempts == 1


async def test_a_holder_that_never_gives_the_turn_back_does_not_stop_the_writers(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{db}?board=t") as board:
        await board.post("first")
        async with turn_held(db):
            started = anyio.current_time()
            with anyio.fail_after(10):
                job = await board.post("second")
                claim = await board.claim_next("w")
                assert claim is not None
                await board.consume(claim)
            assert anyio.current_time() - started >= TURN_PATIENCE * 0.9  # it waited for the turn first
        assert job.id in [found.id async for found in board.iterjobs()]
        await board.post("third")  # the turn again, once the holder is gone


async def test_post_many_mixes_plain_keyed_and_dependent_postings_in_order(tmp_path: Path) -> None:
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=t") as board:
        first = await board.post("a")
        batch = [NewJob("p", {"i": 0}), NewJob("k", key="k1"), NewJob("p", {"i": 1}),
                 NewJob("d", depends_on=[first]), NewJob("p", {"i": 2})]
        jobs = await board.post_many(batch)
        assert [job.name for job in jobs] == ["p", "k", "p", "d", "p"]
        assert [job.sequence for job in jobs] == sorted(job.sequence for job in jobs)
        again = await board.post_many([NewJob("k", key="k1")])
        assert again[0].id == jobs[1].id  # the key finds the job the batch posted
        stored = {job.id: job async for job in board.iterjobs()}
        assert [stored[job.id].details for job in jobs if job.name == "p"] == [{"i": 0}, {"i": 1}, {"i": 2}]
        with pytest.raises(DependencyMissing) as caught:
            await board.post_many([NewJob("p", {"i": 3}), NewJob("d", depends_on=["job-9999999999"])])
        assert caught.value.index == 1 and [job.details for job in caught.value.posted] == [{"i": 3}]
        assert await board.job_count() == 1 + 5 + 1
