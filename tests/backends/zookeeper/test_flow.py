"""Flow control on zookeeper:// (issue 27) beyond the conformance cases: a dead holder's permit, many
claimers on several boards, and what a claim costs with a limit that does not concern it. Real server."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import anyio
import pytest

from jobboard import ClaimLost, JobBoard, NewJob, open_board
from jobboard_zookeeper import ZooKeeperBackend
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)


def board_url(hosts: str, session_timeout: float = 2.0) -> str:
    return f"zookeeper://{hosts}/flow/{uuid.uuid4().hex}?session_timeout={session_timeout}"


async def running(board: JobBoard, group: str) -> int:
    return next(limit.running for limit in await board.limits() if limit.group == group)


async def test_a_dead_holders_permit_returns_within_the_session_timeout(proxy: TcpProxy, zk_hosts: str) -> None:
    url = board_url(proxy.hosts, session_timeout=2)
    with anyio.fail_after(30):
        async with open_board(url) as owner, open_board(url.replace(proxy.hosts, zk_hosts)) as rival:
            await owner.set_limit("g", concurrency=1)
            first, second = await owner.post("work", group="g"), await owner.post("work", group="g")
            stale = await owner.claim(first, "owner")
            assert await rival.claim_next("rival") is None  # the one permit is taken
            proxy.pause()  # no bytes either way: the server expires the owner's session
            paused_at = time.monotonic()
            woken = await rival.wait()  # the permit returns with the claim: the job is free again
            returned_after = time.monotonic() - paused_at
            assert {job.id for job in woken} <= {first.id, second.id} and returned_after < 2 + 1
            taken = await rival.claim_next("rival")
            assert taken is not None and await rival.claim_next("rival") is None  # one permit, not two
            proxy.resume()
            with pytest.raises(ClaimLost):
                await owner.consume(stale)
            assert await running(rival, "g") == 1
            await rival.consume(taken)
            assert await running(rival, "g") == 0


async def test_a_concurrency_limit_holds_over_claimers_on_four_boards(zk_hosts: str) -> None:
    url, limit, jobs = board_url(zk_hosts, session_timeout=4), 2, 24
    live, most, done = 0, 0, list[str]()
    with anyio.fail_after(40):
        async with open_board(url) as first:
            await first.set_limit("g", concurrency=limit)
            posted = {job.id for job in await first.post_many([NewJob("w", group="g") for _ in range(jobs)])}
            boards = [first] + [await open_board(url).__aenter__() for _ in range(3)]
            try:

                async def worker(board: JobBoard, owner: str) -> None:
                    nonlocal live, most
                    while len(done) < jobs:
                        claim = await board.claim_next(owner)
                        if claim is None:
                            await anyio.sleep(0.005)
                            continue
                        live += 1
                        most = max(most, live)
                        await anyio.sleep(0.01)
                        live -= 1
                        await board.consume(claim)
                        done.append(claim.job.id)

                async with anyio.create_task_group() as group:
                    for index in range(8):
                        group.start_soon(worker, boards[index % 4], f"w{index}")
            finally:
                for board in boards[1:]:
                    await board.__aexit__(None, None, None)
    assert sorted(done) == sorted(posted) and most == limit


async def test_a_claim_no_limit_concerns_reads_nothing_more(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit on another group and a pause of another name: a claim + consume of an ungrouped job sends
    the same requests as without flow control (the state is cached, kept by the watch)."""
    url = board_url(zk_hosts, session_timeout=4)
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, ZooKeeperBackend)
        send, sent = backend.zk._send, [0]
        cycle: list[asyncio.Task[Any] | None] = [None]

        async def counted(request: Any, *, retry: bool) -> tuple[int, Any]:
            # the cycle's own requests: not the write markers' deletion, sent by its flusher task 0.2 s after
            # a write (within a cycle whenever a loaded machine stretches one past that: 3 in 60 at load 27)
            sent[0] += asyncio.current_task() is cycle[0]
            return await send(request, retry=retry)

        monkeypatch.setattr(backend.zk, "_send", counted)

        async def requests_per_cycle() -> int:
            await board.post("work")
            before, cycle[0] = sent[0], asyncio.current_task()
            claim = await board.claim_next("w")
            assert claim is not None
            await board.consume(claim)
            return sent[0] - before

        await requests_per_cycle()  # (the first claim reads ahead, and more)
        plain = await requests_per_cycle()
        await board.set_limit("other", concurrency=1)
        await board.pause("another-name")
        await requests_per_cycle()  # (the first claim after a change reads the state once)
        assert await requests_per_cycle() == plain


async def test_a_rate_held_groups_jobs_are_passed_over_unread(zk_hosts: str) -> None:
    """A group out of its rate with many jobs waiting: ``claim_next`` and ``wait`` read one of them (its refusal
    holds the group for the rest of the pass), not every one (a job's group, once read, is known), so a waiter
    is not late by a read per job when its permit comes; a job of no group behind them is still claimed."""
    url = board_url(zk_hosts, session_timeout=4)
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, ZooKeeperBackend)
        await board.set_limit("api", rate=(1, 60.0))
        await board.post_many([NewJob("call", group="api") for _ in range(100)])
        first = await board.claim_next("w")
        assert first is not None and first.job.group == "api"
        with anyio.fail_after(10):
            assert await board.claim_next("w") is None  # (reads the waiting jobs once: their groups are learnt)
            before = backend.zk.requests_sent
            assert await board.claim_next("w") is None
            held_claim = backend.zk.requests_sent - before
            before = backend.zk.requests_sent
            with anyio.move_on_after(0.3):
                await board.wait()
            held_wait = backend.zk.requests_sent - before
            assert held_claim <= 3 and held_wait <= 3, (held_claim, held_wait)  # (3, 100) before: wait read each job
            ungrouped = (await board.post("other")).id
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == ungrouped
