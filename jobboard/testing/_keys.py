"""Conformance: idempotency keys (``post(..., key=...)``)."""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import InvalidJob
from jobboard.job import JobState
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed_ids


class KeysConformance(ConformanceBase):
    @bounded
    async def test_a_key_finds_the_job_on_the_board(self, board: JobBoard) -> None:
        first = await board.post("charge", {"order": 42}, key="order-42")
        again = await board.post("charge", {"order": 42}, key="order-42")
        assert again.id == first.id and dict(again.details) == {"order": 42}
        assert first.key == "order-42" and (await board.get(first)).key == "order-42"
        assert await listed_ids(board) == [first.id]

    @bounded
    async def test_a_key_finds_a_waiting_job(self, board: JobBoard) -> None:
        parent = await board.post("parent")
        child = await board.post("child", depends_on=[parent], key="child")
        assert (await board.post("child", depends_on=[parent], key="child")).id == child.id
        assert await board.job_count() == 2

    @bounded
    async def test_a_key_finds_a_consumed_job(self, board: JobBoard) -> None:
        job = await board.post("charge", key="k")
        claim = await board.claim(job, "w")
        await board.consume(claim, "paid")
        again = await board.post("charge", key="k")
        assert again.id == job.id and again.attempts == 1
        assert await board.job_count() == 0
        assert await board.state(job) is JobState.COMPLETE

    @bounded
    async def test_a_key_finds_trashed_cancelled_and_cascaded_jobs(self, board: JobBoard) -> None:
        trashed = await board.post("t", key="trashed")
        await board.trash(await board.claim(trashed, "w"), "bad")
        cancelled = await board.post("c", key="cancelled")
        dependent = await board.post("d", depends_on=[cancelled], key="dependent")
        await board.cancel(cancelled, "no longer wanted")
        for job, key in ((trashed, "trashed"), (cancelled, "cancelled"), (dependent, "dependent")):
            assert (await board.post(job.name, key=key)).id == job.id
            assert await board.state(job) is JobState.TRASHED
        assert await board.job_count() == 0

    @bounded
    async def test_other_keys_and_unkeyed_posts_make_new_jobs(self, board: JobBoard) -> None:
        a = await board.post("x", key="a")
        b = await board.post("x", key="b")
        plain = [await board.post("x"), await board.post("x")]
        assert len({a.id, b.id, *(job.id for job in plain)}) == 4
        assert plain[0].key is None

    @bounded
    async def test_concurrent_posts_with_one_key_make_one_job(self, open_boards: BoardOpener) -> None:
        boards = [await open_boards(), await open_boards()]
        ids: list[str] = []

        async def post(board: JobBoard) -> None:
            ids.append((await board.post("once", key="the-one")).id)

        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(post, boards[index % 2])
        assert len(set(ids)) == 1 and len(ids) == 8
        assert await boards[0].job_count() == 1

    @bounded
    async def test_bad_keys_are_refused_and_nothing_is_written(self, board: JobBoard) -> None:
        for bad in ("", 42, "k" * 201):
            with pytest.raises(InvalidJob, match="key"):
                await board.post("x", key=bad)  # type: ignore[arg-type]
        assert await board.job_count() == 0
        odd = await board.post("x", key="a/b c?%&é")  # any string of up to 200 characters
        assert (await board.post("x", key="a/b c?%&é")).id == odd.id

    @bounded
    async def test_a_settled_key_expires_after_the_retention(self, open_boards: BoardOpener) -> None:
        retention = self.delay_unit
        board = await open_boards(key_retention=retention)
        done = await board.post("x", key="done")
        await board.consume(await board.claim(done, "w"))
        living = await board.post("x", key="living")
        assert (await board.post("x", key="done")).id == done.id
        await anyio.sleep(retention * 1.5)
        renewed = await board.post("x", key="done")
        assert renewed.id != done.id  # settled longer ago than the retention: a new job
        assert (await board.post("x", key="living")).id == living.id  # on the board: never expires
        assert sorted(await listed_ids(board)) == sorted([living.id, renewed.id])
