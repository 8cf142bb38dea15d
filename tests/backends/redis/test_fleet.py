"""redis://: a process pays for its own jobs, not the fleet's (issue 28): one waiting board woken per job,
one waiter per wake-up inside a board, claim losses told to the owner's session, no stream read unless
someone listens."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest

from jobboard import Claim, JobBoard, NewJob, open_board
from jobboard.testing._base import watching
from jobboard_redis import RedisBackend

pytestmark = pytest.mark.timeout(60)


def url_of(base: str) -> str:
    return f"{base}/0/fleet-{uuid.uuid4().hex}?session_timeout=10"


def backend(board: JobBoard) -> RedisBackend:
    assert isinstance(board.backend, RedisBackend)
    return board.backend


@asynccontextmanager
async def boards(url: str, count: int) -> AsyncIterator[list[JobBoard]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(open_board(url)) for _ in range(count)]


async def registered(board: JobBoard) -> int:
    """How many boards the server has registered as waiting for work (two fields each: id, lists)."""
    return int(await backend(board).client.command("HLEN", backend(board).options.prefix + "wait")) // 2


async def listed(board: JobBoard, *lists: str) -> int:
    """How many registrations the waiting lists ``wn``, ``wn:<name>`` hold."""
    prefix = backend(board).options.prefix
    return sum(await backend(board).client.pipeline([("LLEN", prefix + name) for name in lists]))


async def until(check: Callable[[], Awaitable[bool]], limit: float = 5.0) -> None:
    with anyio.fail_after(limit):
        while not await check():  # noqa: ASYNC110 - the server's state, or another task's list
            await anyio.sleep(0.01)


async def test_a_post_wakes_one_waiting_board_of_many(redis_url: str) -> None:
    async with boards(url_of(redis_url), 5) as (poster, *waiters):
        returned: list[int] = []

        async def wait(index: int) -> None:
            await waiters[index].wait()
            returned.append(index)

        async with anyio.create_task_group() as group:
            for index in range(len(waiters)):
                group.start_soon(wait, index)
            await until(lambda: _equals(registered(poster), 4))
            await poster.post("one")
            await until(lambda: _true(len(returned) == 1))
            await anyio.sleep(0.4)  # well under the 1 s poll: the others were not woken
            assert len(returned) == 1
            await poster.post_many([NewJob("more") for _ in range(3)])
            await until(lambda: _true(len(returned) == 4), limit=0.9)
        assert await listed(poster, "wn", "wn:one", "wn:more") == 0  # only live registrations are listed


async def test_in_one_board_a_post_wakes_one_waiter_and_k_jobs_wake_k(redis_url: str) -> None:
    async with boards(url_of(redis_url), 2) as (poster, waiter):
        returned: list[int] = []

        async def wait(index: int) -> None:
            returned.append(len(await waiter.wait()))

        async with anyio.create_task_group() as group:
            for index in range(6):
                group.start_soon(wait, index)
            await until(lambda: _equals(registered(poster), 1))
            await poster.post("one")
            await until(lambda: _true(len(returned) == 1))
            await anyio.sleep(0.4)
            assert returned == [1]
            await poster.post_many([NewJob("more") for _ in range(3)])  # one wake-up: the waiter finds 3
            await until(lambda: _true(len(returned) >= 4), limit=0.9)
            group.cancel_scope.cancel()


async def test_a_board_that_only_claims_reads_no_event(redis_url: str) -> None:
    async with boards(url_of(redis_url), 3) as (poster, first, second):
        await poster.post_many([NewJob("j", {"i": i}) for i in range(100)])
        for _ in range(50):
            for board in (first, second):
                claim = await board.claim_next("w")
                assert claim is not None
                await board.consume(claim, "done")
        assert backend(first).events_decoded == backend(second).events_decoded == 0
        assert not backend(first).view.reading and not backend(second).view.reading


async def told_to_owner(owner: JobBoard, claim: Claim, act: Callable[[], Awaitable[object]]) -> list[str]:
    """What ``owner.watch_claim(claim)`` returns when another board's ``act`` ends the claim; it must return
    within 0.9 s of ``act``."""
    async with watching(owner, claim) as reasons:
        await anyio.sleep(0.2)
        await act()
        await until(lambda: _true(bool(reasons)), limit=0.9)
    return reasons


async def test_a_cancel_by_another_board_is_told_to_the_owner(redis_url: str) -> None:
    async with boards(url_of(redis_url), 2) as (owner, other):
        claim = await owner.claim(await owner.post("long"), "w")
        assert await told_to_owner(owner, claim, lambda: other.cancel(claim.job.id, "not needed")) == ["trashed"]
        assert backend(owner).notices.received == 1 and not backend(owner).view.reading


async def test_a_settle_by_another_board_is_told_to_the_owner(redis_url: str) -> None:
    async with boards(url_of(redis_url), 2) as (owner, other):
        claim = await owner.claim(await owner.post("long"), "w")
        assert await told_to_owner(owner, claim, lambda: other.consume(claim, "done elsewhere")) == ["consumed"]


async def test_a_closed_board_leaves_no_registration_nor_notices(redis_url: str) -> None:
    async with boards(url_of(redis_url), 1) as (watcher,):
        board = open_board(url_of(redis_url).replace("fleet-", "fleet-closed-"))
        async with board:
            session, prefix = backend(board).session.id, backend(board).options.prefix
            with anyio.move_on_after(0.2):
                await board.wait()
            with anyio.move_on_after(0.2):
                await board.wait(names=["a", "b"])  # registered again, for other names
            assert await registered(board) == 1 and await listed(board, "wn", "wn:a", "wn:b") == 2
        found = await backend(watcher).client.pipeline([("HLEN", prefix + "wait"), ("EXISTS", prefix + "wk:" + session),
                                                        *[("LLEN", prefix + name) for name in ("wn", "wn:a", "wn:b")]])
        assert found == [0, 0, 0, 0, 0]


async def test_the_stream_is_read_only_while_someone_listens(redis_url: str) -> None:
    async with boards(url_of(redis_url), 2) as (board, other):
        view = backend(board).view
        assert not view.reading
        async with board.events() as stream:
            assert view.reading
            job = await other.post("seen")
            event = await anext(stream)
            assert event.job_id == job.id
        with anyio.fail_after(3):  # the reader stops at its next read (at most 1 s)
            while view.reading:  # noqa: ASYNC110 - a flag of the board's reader
                await anyio.sleep(0.05)


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def _true(value: bool) -> bool:
    return value


async def test_a_user_refused_blmpop_still_finds_work_by_peeking(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    user = f"noblmpop{uuid.uuid4().hex[:8]}"
    url = url_of(redis_url)
    async with boards(url, 1) as (admin,):
        await backend(admin).client.command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-blmpop")
        try:
            async with open_board(url.replace("redis://", f"redis://{user}:pw@")) as refused:
                found: list[str] = []

                async def wait() -> None:
                    found.extend(job.id for job in await refused.wait())

                with caplog.at_level(logging.ERROR, logger="jobboard_redis"):
                    async with anyio.create_task_group() as group:
                        group.start_soon(wait)
                        await until(lambda: _equals(registered(admin), 1))
                        job = await admin.post("found by a peek")
                        await until(lambda: _true(bool(found)), limit=3.0)  # POLL is 1 s
                assert found == [job.id]
                assert any("refused" in record.getMessage() for record in caplog.records)
        finally:
            await backend(admin).client.command("ACL", "DELUSER", user)
