"""zookeeper:// posts in one request (the version chain, :mod:`jobboard_zookeeper.chain`): one
request per post while a board posts alone; boards posting at the same time, and replies lost in
the middle of a chain of pipelined posts, never duplicate or lose a job, and ids keep posting order."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from jobboard import Job, JobBoard, NewJob, open_board
from jobboard_zookeeper import ZooKeeperBackend
from jobboard_zookeeper.board import ZooKeeperBoard
from tests.support.faultproxy import FaultLink

pytestmark = pytest.mark.timeout(90)

Posted = tuple[float, float, Job]
"""When a post was called, when it returned, and the job."""


@pytest.fixture
async def link(zk_hosts: str) -> AsyncIterator[FaultLink]:
    host, port = zk_hosts.rsplit(":", 1)
    async with FaultLink([(host, int(port))]) as running:
        yield running


def url_of(hosts: str) -> str:
    return f"zookeeper://{hosts}/chain/{uuid.uuid4().hex}?session_timeout=10"


def chain_of(board: JobBoard) -> tuple[int, int]:
    """The board's chained posts and conflicts so far."""
    assert isinstance(board.backend, ZooKeeperBackend)
    chain = board.backend._poster.chain
    return chain.chained, chain.conflicts


def groups_of(board: JobBoard) -> int:
    assert isinstance(board.backend, ZooKeeperBackend)
    return board.backend._batches.grouper.groups


async def post_in_flight(board: JobBoard, tag: str, count: int, in_flight: int,
                         posted: list[Posted], *, spread: int = 4, signal: tuple[int, asyncio.Event] | None = None,
                         ) -> None:
    """``count`` posts, ``in_flight`` at a time, each recorded with its call and return times; the
    lanes post in ``spread`` different turns of the event loop (so in as many groups, pipelined);
    ``signal`` is set once ``posted`` holds that many."""

    async def poster(lane: int) -> None:
        for index in range(lane, count, in_flight):
            for _ in range(lane % spread):
                await asyncio.sleep(0)
            called = time.monotonic()
            job = await board.post(tag, {"i": index})
            posted.append((called, time.monotonic(), job))
            if signal is not None and len(posted) >= signal[0]:
                signal[1].set()

    await asyncio.gather(*(poster(lane) for lane in range(in_flight)))


def assert_exactly_once(posted: list[Posted], stored: list[Job]) -> None:
    ids = [job.id for _, _, job in posted]
    assert len(set(ids)) == len(ids), "two posts returned the same id"
    assert sorted(job.id for job in stored) == sorted(ids), "a job was lost or posted twice"
    by_id = {job.id: job for job in stored}
    assert all(by_id[job.id].name == job.name and by_id[job.id].details == job.details for _, _, job in posted)


def assert_posting_order(posted: list[Posted]) -> None:
    """A post that returned before another was called has the smaller id (same priority)."""
    done = sorted(posted, key=lambda entry: entry[1])
    at, latest = 0, ""
    for called, _, job in sorted(posted, key=lambda entry: entry[0]):
        while at < len(done) and done[at][1] < called:
            latest = max(latest, done[at][2].id)
            at += 1
        assert job.id > latest, f"{job.id} was posted after {latest} returned"


def count_posting_requests(board: ZooKeeperBoard) -> list[int]:
    """Counts the requests that post or take ids (not marker deletions, reads, pings)."""
    zk, sent = board.backend.zk, [0]
    original = zk._send

    async def send(request: Any, *, retry: bool) -> Any:
        ops = getattr(request, "ops", None) or []
        if any("/jobs/" in op.path or "/counters/" in op.path for op in ops) or "/counters/" in str(
                getattr(request, "path", "")):
            sent[0] += 1
        return await original(request, retry=retry)

    zk._send = send  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize("in_flight", [1, 16])
async def test_a_board_posting_alone_sends_one_request_per_group_of_posts(zk_hosts: str, in_flight: int) -> None:
    with anyio.fail_after(40):
        async with open_board(url_of(zk_hosts)) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            posted: list[Posted] = []
            groups = groups_of(board)
            sent = count_posting_requests(board)
            await post_in_flight(board, "j", 400, in_flight, posted)
            requests, groups = sent[0], groups_of(board) - groups
            stored = [job async for job in board.iterjobs()]
            chained, conflicts = chain_of(board)
    assert_exactly_once(posted, stored)
    assert_posting_order(posted)
    assert conflicts == 0 and chained >= 390, (chained, conflicts)
    assert requests == groups, f"{requests} requests for {groups} groups of posts (2 a group with a bump first)"
    assert groups <= (400 if in_flight == 1 else 400 / 2), f"{groups} groups for 400 posts {in_flight} at a time"


async def test_boards_posting_at_once_never_duplicate_or_lose_a_job_and_keep_posting_order(
        zk_hosts: str) -> None:
    url = url_of(zk_hosts)
    with anyio.fail_after(60):
        async with open_board(url) as first, open_board(url) as second, open_board(url) as third:
            posted: list[Posted] = []
            batches: list[Job] = []

            async def batch() -> None:  # post_many bumps the counter in between
                for _ in range(3):
                    batches.extend(await third.post_many([NewJob("b", {"i": i}) for i in range(50)]))
                    await anyio.sleep(0.05)

            await asyncio.gather(post_in_flight(first, "a", 400, 8, posted),
                                 post_in_flight(second, "b", 400, 8, posted),
                                 post_in_flight(third, "c", 100, 1, posted), batch())
            stored = [job async for job in first.iterjobs()]
            conflicts = sum(chain_of(board)[1] for board in (first, second, third))
    assert_exactly_once(posted + [(0.0, 0.0, job) for job in batches], stored)
    assert_posting_order(posted)
    assert conflicts > 0, "the boards never broke each other's chain: the fallback was not exercised"


@pytest.mark.parametrize("fault", ["lose_reply", "lose_request"])
async def test_a_reply_lost_in_the_middle_of_a_chain_loses_and_duplicates_nothing(
        link: FaultLink, fault: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url_of(link.hosts)) as board:
            posted: list[Posted] = []
            await post_in_flight(board, "warm", 64, 16, posted)
            chained_before, _ = chain_of(board)

            midway = asyncio.Event()

            async def strike() -> None:
                await midway.wait()
                getattr(link, fault)(posts_only=True)  # a chained post in the middle of the stream

            await asyncio.gather(post_in_flight(board, "j", 600, 16, posted, signal=(64 + 150, midway)), strike())
            assert link.faults.done["lost_" + fault.removeprefix("lose_")] == 1
            await post_in_flight(board, "after", 64, 16, posted)
            chained_after, _ = chain_of(board)
            stored = [job async for job in board.iterjobs()]
    assert_exactly_once(posted, stored)
    assert_posting_order(posted)
    assert chained_after - chained_before >= 32, "the chain was not re-established after the fault"


async def test_batches_keep_their_order_while_another_board_posts(
        zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chained chunks (several in flight) that find the counter moved take ids apart, in order."""
    from jobboard_zookeeper import batching

    monkeypatch.setattr(batching, "CHUNK_JOBS", 50)
    url = url_of(zk_hosts)
    with anyio.fail_after(60):
        async with open_board(url) as batcher, open_board(url) as single:
            posted: list[Posted] = []
            batches: list[list[Job]] = []

            moved = asyncio.Event()

            async def post_batches() -> None:
                await moved.wait()  # the counter moved since the batcher opened: its chain is stale
                batches.extend([await batcher.post_many([NewJob("b", {"r": round_, "i": i}) for i in range(400)])
                                for round_ in range(6)])

            await asyncio.gather(post_batches(), post_in_flight(single, "s", 600, 8, posted, signal=(16, moved)))
            stored = [job async for job in batcher.iterjobs()]
            conflicts = chain_of(batcher)[1]
    assert_exactly_once(posted + [(0.0, 0.0, job) for batch in batches for job in batch], stored)
    for batch in batches:
        assert [job.id for job in batch] == sorted(job.id for job in batch), "a batch lost its order"
    assert conflicts > 0, "the batches never found the counter moved: the fallback was not exercised"
