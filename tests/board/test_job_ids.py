"""``could_be_job_id``: each backend knows the form of its ids; the contract's default knows nothing."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard.backend import Backend
from jobboard.board.contract import JobBoard
from jobboard_memory.board import MemoryBackend, MemoryBoard
from jobboard_redis.board import RedisBackend
from jobboard_zookeeper.board import ZooKeeperBackend

NOT_IDS = ("", "bogus-id", "job-", "job-12", "2-", "-0000000000001", "２-0000000000001", "012", "1.5", " 7")


class SaysNothingBackend(MemoryBackend):
    could_be_job_id = Backend.could_be_job_id


@pytest.mark.parametrize(("backend_class", "ids"), [
    (MemoryBackend, ("job-0000000001", "job-12345678901")),
    (ZooKeeperBackend, ("2-0000000000001", "4-0000000123456")),
    (RedisBackend, ("1", "987654321")),
])
def test_each_backend_tells_its_own_ids_from_other_strings(backend_class: type[Backend], ids: tuple[str, ...]) -> None:
    board = backend_class.__new__(backend_class)  # the form of an id needs no connection
    assert [board.could_be_job_id(job_id) for job_id in ids] == [True] * len(ids)
    assert [text for text in NOT_IDS if board.could_be_job_id(text)] == []


def test_the_default_refuses_only_the_empty_id() -> None:
    async def check() -> list[bool]:
        with anyio.fail_after(5):
            async with JobBoard(SaysNothingBackend(f"memory://{uuid.uuid4().hex}")) as board:
                posted = await board.post("a")
                return [board.could_be_job_id(text) for text in ("", "bogus-id", posted.id)]

    assert anyio.run(check) == [False, True, True]


@pytest.mark.parametrize("past_the_last", ["job-0000000003", "job-99999999999"])
def test_memory_knows_the_ids_it_has_not_given_yet(past_the_last: str) -> None:
    async def check() -> tuple[bool, bool]:
        with anyio.fail_after(5):
            async with MemoryBoard(f"memory://{uuid.uuid4().hex}") as board:
                first = await board.post("a")
                await board.post("b")
                await board.consume(await board.claim(first, "w1"))
                return await board.never_posted(first.id), await board.never_posted(past_the_last)

    assert anyio.run(check) == (False, True)
