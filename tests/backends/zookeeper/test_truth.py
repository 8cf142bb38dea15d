"""zookeeper:// never reports a write it did not make, and never makes one twice.

Each test reproduces an interleaving that once broke that promise:

* the owner is frozen (its whole event loop blocked, as under SIGSTOP) past its
  session timeout while another board takes the job over; on resume its settle
  must raise ``ClaimLost``, not return normally;
* a post's reply is lost after the server applied it, and the job is consumed or
  trashed by another board before the poster reads back: the post must not be
  written a second time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from aiozk import exc, protocol

from jobboard import (
    BackendUnavailable,
    BoardConflict,
    Claim,
    ClaimLost,
    Job,
    JobBoard,
    JobNotFound,
    JobState,
    UnknownOutcome,
    open_board,
)
from jobboard_zookeeper import ZooKeeperBackend, ZooKeeperBoard, markers
from jobboard_zookeeper.keys import collect_keys
from jobboard_zookeeper.ops import Create
from tests.backends.zookeeper.test_faults import board_url
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(90)

SESSION_TIMEOUT = 2.0


def run_in_thread(work: Callable[[], Awaitable[None]]) -> tuple[threading.Thread, list[Exception]]:
    """Run ``work`` on its own event loop in a thread (it keeps going while ours is frozen)."""
    errors: list[Exception] = []

    def target() -> None:
        try:
            asyncio.run(asyncio.wait_for(work(), 30))  # type: ignore[arg-type]
        except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
            errors.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def freeze_until(thread: threading.Thread, errors: list[Exception]) -> None:
    """Block this thread's event loop (like SIGSTOP) until the rival is done."""
    thread.join(timeout=40)
    assert not thread.is_alive(), "the rival did not finish"
    assert not errors, errors


@asynccontextmanager
async def frozen_past_the_session(
    zk_hosts: str, rival: Callable[[str, Job], Awaitable[None]],
) -> AsyncIterator[tuple[JobBoard, Job, Claim]]:
    """An owner claims a fresh job, then its loop freezes while ``rival(url, job)`` runs on another; the body
    gets the owner, the job and the owner's now stale claim (within 60 s in all)."""
    url = board_url(zk_hosts, session_timeout=SESSION_TIMEOUT)
    with anyio.fail_after(60):
        async with open_board(url) as owner:
            job = await owner.post("a")
            stale = await owner.claim(job, "owner")
            freeze_until(*run_in_thread(lambda: rival(url, job)))
            yield owner, job, stale


async def test_stale_consume_after_a_freeze_past_the_session_is_refused(zk_hosts: str) -> None:
    async def rival(url: str, job: Job) -> None:
        async with open_board(url) as board:
            await board.wait()  # the frozen owner's session expires, its lock goes
            claim = await board.claim(job, "rival")
            await board.consume(claim, "rival's")

    async with frozen_past_the_session(zk_hosts, rival) as (owner, job, stale):
        with pytest.raises(ClaimLost):
            await owner.consume(stale, "stale")
        assert await owner.state(job) is JobState.COMPLETE


async def test_stale_abandon_after_a_freeze_past_the_session_is_refused(zk_hosts: str) -> None:
    holders: list[ZooKeeperBoard] = []

    async def rival(url: str, job: Job) -> None:
        board = ZooKeeperBoard(url)
        await board.open()  # left open: it holds the job on while the owner resumes
        await board.wait()
        await board.claim(job, "rival")
        holders.append(board)

    async with frozen_past_the_session(zk_hosts, rival) as (owner, job, stale):
        with pytest.raises(ClaimLost):
            await owner.abandon(stale, retry_after=30)
        fresh = await owner.get(job)
        assert fresh.not_before is None and fresh.attempts == 2  # the rival's claim stands
        assert await owner.owner(job) == "rival"


async def claim_soon(board: JobBoard) -> Any:
    """Claim the next job once this board has seen it."""
    while (claim := await board.claim_next("rival")) is None:
        await board.wait()
    return claim


def housekeeping(request: Any) -> bool:
    """Whether a multi is the board's own background work (marker deletions, the collector's node)."""
    return all(isinstance(op, protocol.DeleteRequest) and "/marks/" in op.path
               or op.path.endswith("/collector") for op in request.requests)


def lose_reply_while(board: JobBoard, meanwhile: Callable[[], Awaitable[None]]) -> list[int]:
    """The next post, claim or settle multi is applied but its reply lost; ``meanwhile`` runs
    before the poster learns it (background multis, see ``housekeeping``, pass untouched)."""
    assert isinstance(board.backend, ZooKeeperBackend)
    conn = board.backend.zk._session.conn  # test-only reach into the client to break one reply
    original = conn.send
    lost = [0]

    def send(request: Any, xid: Any = None) -> Any:
        reply = original(request, xid=xid)
        if not isinstance(request, protocol.TransactionRequest) or housekeeping(request) or lost[0]:
            return reply
        lost[0] += 1
        broken = asyncio.get_running_loop().create_future()

        async def hide(_: Any) -> None:
            conn.writer.transport.abort()
            await meanwhile()
            broken.set_exception(exc.ConnectError(conn.host, conn.port))

        reply.add_done_callback(lambda answered: asyncio.ensure_future(hide(answered)))
        return broken

    conn.send = send
    return lost


def lose_reply_while_the_rival_settles(
    poster: JobBoard, rival: JobBoard, settle: Callable[[Claim], Awaitable[object]],
) -> list[int]:
    """:func:`lose_reply_while` the ``rival`` claims the job (once it sees it) and ``settle``s that claim."""
    async def claim_and_settle() -> None:
        await settle(await claim_soon(rival))

    return lose_reply_while(poster, claim_and_settle)


def lose_reply_then_pause(board: JobBoard, proxy: TcpProxy) -> list[int]:
    """:func:`lose_reply_while` the proxy goes silent (paused: no bytes either way until the test resumes
    it)."""
    async def black_hole() -> None:
        proxy.pause()

    return lose_reply_while(board, black_hole)


async def unavailable_after_a_lost_reply(
    board: JobBoard, proxy: TcpProxy, call: Callable[[], Awaitable[object]],
) -> None:
    """``call``'s multi is applied but its reply lost and the proxy paused: it raises BackendUnavailable;
    then the proxy resumes."""
    lose_reply_then_pause(board, proxy)
    with pytest.raises(BackendUnavailable):
        await call()
    proxy.resume()


@asynccontextmanager
async def board_behind_proxy(zk_hosts: str) -> AsyncIterator[tuple[TcpProxy, JobBoard]]:
    """A board reaching ZooKeeper through a fresh proxy (session 8 s, connect timeout 1 s); closed on exit."""
    host, port = zk_hosts.rsplit(":", 1)
    async with TcpProxy(host, int(port)) as proxy, open_board(
            board_url(proxy.hosts, session_timeout=8, connect_timeout=1)) as board:
        yield proxy, board


@pytest.mark.parametrize("keep_result", [False, True])
async def test_a_post_consumed_before_its_lost_reply_is_resolved_is_not_posted_again(
    zk_hosts: str, keep_result: bool,
) -> None:
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as poster, open_board(url) as rival:
            lost = lose_reply_while_the_rival_settles(
                poster, rival, lambda claim: rival.consume(claim, "done"))
            job = await poster.post("once", {"k": 1}, keep_result=keep_result)
            assert lost == [1]
            assert await poster.job_count() == 0, "the post was written twice"
            outcome = await poster.wait_for_completion(job)
            assert outcome.state is JobState.COMPLETE
            assert outcome.result == ("done" if keep_result else None)


async def test_a_post_trashed_before_its_lost_reply_is_resolved_is_not_posted_again(zk_hosts: str) -> None:
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as poster, open_board(url) as rival:
            lose_reply_while_the_rival_settles(poster, rival, lambda claim: rival.trash(claim, "bad"))
            job = await poster.post("once")
            assert await poster.job_count() == 0, "the post was written twice"
            assert await poster.state(job) is JobState.TRASHED
            assert [t.reason async for t in poster.trashed()] == ["bad"]


async def test_settles_with_lost_replies_are_recognised_as_ours(zk_hosts: str) -> None:
    """The positive side: a settle whose own reply was lost returns normally (it was applied)."""
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            for settle in ("consume", "abandon", "trash"):
                job = await board.post(settle)
                claim = await board.claim(job, "me")
                lost = lose_reply_while(board, lambda: anyio.lowlevel.checkpoint())
                started = time.monotonic()
                if settle == "consume":
                    await board.consume(claim)
                elif settle == "abandon":
                    await board.abandon(claim, retry_after=30)
                else:
                    await board.trash(claim, "why")
                assert lost == [1], settle
                assert time.monotonic() - started < 10
            states = {j.name: j async for j in board.iterjobs()}
            assert set(states) == {"abandon"} and states["abandon"].not_before is not None


async def test_a_conflict_retrying_cannot_fix_is_not_reported_as_transient(zk_hosts: str) -> None:
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            job = await board.post("kept", keep_result=True)
            stray = f"{board.backend.options.root}/results/{job.id}"  # as another tool (or an old bug) left it
            assert (await board.backend.zk.multi([Create(stray, b"\x01")])).ok
            claim = await board.claim(job, "me")
            with pytest.raises(BoardConflict, match=f"NodeExists on {stray}"):
                await board.consume(claim, "result")
            assert await board.owner(job) == "me"  # nothing was changed


async def marker_names(board: ZooKeeperBoard) -> list[str]:
    listing = await board.backend.zk.children(f"{board.backend.options.root}/marks")
    return sorted(listing[0]) if listing else []


async def test_write_markers_are_deleted_once_resolved(zk_hosts: str) -> None:
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            for _ in range(300):
                claim = await board.claim(await board.post("x"), "me")
                await board.consume(claim)
            for _ in range(50):  # deleted in batches, within about a second
                if not await marker_names(board):
                    break
                await anyio.sleep(0.1)
            assert await marker_names(board) == []


async def test_markers_of_a_dead_board_are_collected_after_the_grace(
    zk_hosts: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(markers, "MARKER_GRACE", 0.5)
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            left = [f"{board.backend.options.root}/marks/deadbeef-{n:010d}" for n in range(3)]
            assert (await board.backend.zk.multi([Create(path) for path in left])).ok
            collector = markers.Markers(board.backend.zk, board.backend._paths)
            assert await collector.collect() == 0  # first seen now
            assert await collector.collect() == 0  # not yet seen for the grace
            await anyio.sleep(0.6)
            assert await collector.collect() == 3
            assert await marker_names(board) == []


async def test_expired_keys_are_collected_and_live_ones_kept(zk_hosts: str) -> None:
    url = board_url(zk_hosts, session_timeout=6, key_retention=0.3)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            await board.consume(await board.claim(await board.post("x", key="settled"), "me"))
            living = await board.post("x", key="living")
            await anyio.sleep(0.5)
            server_now = (await board.backend.zk.bump(board.backend._paths.counter(0))).mtime
            assert await collect_keys(board.backend.zk, board.backend._paths, board.key_retention, server_now) == 1
            listing = await board.backend.zk.children(f"{board.backend.options.root}/keys")
            assert listing is not None and listing[0] == ["k-living"]
            assert (await board.post("x", key="living")).id == living.id


@pytest.mark.parametrize("key", [None, "order-7"])
async def test_a_post_that_cannot_be_resolved_says_so(zk_hosts: str, key: str | None) -> None:
    """Unkeyed: UnknownOutcome (posting again could make a second job). Keyed: BackendUnavailable,
    and posting again with the key finds the first job."""
    with anyio.fail_after(40):
        async with board_behind_proxy(zk_hosts) as (proxy, board):
            lose_reply_then_pause(board, proxy)
            expected = BackendUnavailable if key else UnknownOutcome
            with pytest.raises(expected) as raised:
                await board.post("once", key=key)
            assert isinstance(raised.value, UnknownOutcome) is (key is None)
            proxy.resume()
            if key is not None:
                again = await board.post("once", key=key)
                assert [j.id async for j in board.iterjobs()] == [again.id]
            else:
                assert await board.job_count() == 1  # it was applied; nothing was written twice


async def test_a_cancel_repeated_after_an_unresolved_lost_reply_learns_it_was_applied(zk_hosts: str) -> None:
    """The first cancel's reply is lost and ZooKeeper stays out of reach: BackendUnavailable. Its
    repetition must find the first one applied (not JobNotFound), yet a cancel of a job trashed
    by someone else still raises JobNotFound."""
    with anyio.fail_after(40):
        async with board_behind_proxy(zk_hosts) as (proxy, board):
            job = await board.post("doomed")

            await unavailable_after_a_lost_reply(board, proxy, lambda: board.cancel(job, "not wanted"))
            await board.cancel(job, "not wanted")  # the first one was applied: no JobNotFound
            assert [t.reason async for t in board.trashed()] == ["not wanted"]
            other = await board.post("other")
            await board.trash(await board.claim(other, "w"), "not wanted")
            with pytest.raises(JobNotFound):
                await board.cancel(other, "not wanted")
