"""Review of issue 9's change (write markers, idempotency keys): interleavings that still break it.

Each test forces one interleaving deterministically, with the tools of
``tests/backends/zookeeper/test_truth.py`` (a reply lost after the server applied the
write, a black-holed proxy) or by running a rival's writes at a chosen point.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from aiozk import protocol

from jobboard import (
    AlreadyClaimed,
    BackendUnavailable,
    BoardConflict,
    JobBoardError,
    JobState,
    open_board,
)
from jobboard_zookeeper import ZooKeeperBackend, ZooKeeperBoard, markers
from jobboard_zookeeper.keys import collect_keys
from jobboard_zookeeper.markers import Marker
from jobboard_zookeeper.ops import Create, Delete, Op, OutcomeUnknown, TxnResult
from tests.backends.zookeeper.test_faults import board_url
from tests.backends.zookeeper.test_truth import (
    board_behind_proxy,
    lose_reply_while,
    unavailable_after_a_lost_reply,
)
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(90)


async def test_two_settles_of_one_claim_resolving_one_lost_reply_raise_no_native_error(zk_hosts: str) -> None:
    """Task 1's consume loses its reply; task 2 consumes the same claim while task 1 reads back.
    Both read the marker; the second ``del self.unsettled[job]`` in ``_resolved`` raises KeyError."""
    url = board_url(zk_hosts, session_timeout=6)
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            job = await board.post("x")
            claim = await board.claim(job, "me")
            original = board.backend._markers.applied
            inside: list[Marker] = []
            reading, both = asyncio.Event(), asyncio.Event()

            async def applied(marker: Marker) -> bool:  # both tasks read back at once
                inside.append(marker)
                reading.set()
                if len(inside) == 2:
                    both.set()
                await asyncio.wait_for(both.wait(), 10)
                return await original(marker)

            board.backend._markers.applied = applied  # type: ignore[method-assign]
            lose_reply_while(board, anyio.lowlevel.checkpoint)
            first = asyncio.create_task(board.consume(claim, "one"))
            await reading.wait()  # the first consume's reply was lost; it reads its marker back
            second = asyncio.create_task(board.consume(claim, "one"))
            outcomes = await asyncio.gather(first, second, return_exceptions=True)
            assert len(inside) == 2
            assert all(o is None or isinstance(o, JobBoardError) for o in outcomes), outcomes
            assert await board.state(job) is JobState.COMPLETE


async def test_a_keyed_post_retried_after_its_dependency_went_finds_the_job(zk_hosts: str) -> None:
    """The doc promises a keyed post may be repeated after BackendUnavailable. If the first
    post was applied and its dependency consumed meanwhile, the repeat must find the job:
    ``Poster._ops`` locates the dependencies (InvalidJob) before the key is tried."""
    with anyio.fail_after(30):
        async with open_board(board_url(zk_hosts, session_timeout=6)) as board:
            parent = await board.post("parent")
            child = await board.post("child", depends_on=[parent], key="child-of-parent")
            await board.consume(await board.claim(parent, "w"), "r")
            again = await board.post("child", depends_on=[parent], key="child-of-parent")
            assert again.id == child.id
            assert await board.job_count() == 1


async def test_closing_while_zookeeper_does_not_answer_raises_no_native_error(
    zk_hosts: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(markers, "FLUSH_DELAY", 30.0)  # the consume's marker is still queued at close
    host, port = zk_hosts.rsplit(":", 1)
    with anyio.fail_after(40):
        async with TcpProxy(host, int(port)) as proxy:
            board = ZooKeeperBoard(board_url(proxy.hosts, session_timeout=8, ping_timeout=3))
            await board.open()
            await board.consume(await board.claim(await board.post("x"), "me"))
            proxy.pause()
            try:
                await board.aclose()  # Markers.close: wait_for(_flush(), 1.0) raises TimeoutError
            finally:
                proxy.resume()
            assert not board.is_open


async def test_a_claim_whose_read_back_failed_does_not_wedge_the_job(zk_hosts: str) -> None:
    """The claim multi is applied, its reply lost, and ``_lock_is`` cannot reach the server
    (BackendUnavailable). The session survives: its ephemeral lock stays, no Claim holds it,
    and every later claim of the job is AlreadyClaimed for as long as this board is open."""
    with anyio.fail_after(40):
        async with board_behind_proxy(zk_hosts) as (proxy, board):
            job = await board.post("x")

            await unavailable_after_a_lost_reply(board, proxy, lambda: board.claim(job, "me"))
            claim = None
            with anyio.move_on_after(6):  # the session (8 s) is alive throughout
                while claim is None:
                    try:
                        claim = await board.claim(job, "me")
                    except (AlreadyClaimed, BackendUnavailable):
                        await anyio.sleep(0.2)
            assert claim is not None, f"job still locked by {await board.owner(job)!r}, by nobody's claim"


async def test_the_key_collector_never_deletes_a_key_settled_within_the_retention(zk_hosts: str) -> None:
    """The collector reads an expired key (version 1). Before its ``Delete(key, 1)``, a post
    replaces the key and its job is consumed: were the key deleted and created again, its version
    would be 1 again (ABA); it is taken over with set_data, so its version only grows."""
    retention = 2.0
    url = board_url(zk_hosts, session_timeout=6, key_retention=retention)
    with anyio.fail_after(40):
        async with open_board(url) as collector, open_board(url) as rival:
            assert isinstance(collector.backend, ZooKeeperBackend)
            old = await rival.post("x", key="k")
            await rival.consume(await rival.claim(old, "w"))
            await anyio.sleep(retention + 0.3)  # expired
            fresh: list[str] = []
            original = collector.backend.zk.multi

            async def multi(ops: list[Op], **kwargs: Any) -> TxnResult:
                if not fresh and isinstance(ops[0], Delete) and "/keys/" in ops[0].path:
                    job = await rival.post("x", key="k")  # takes the expired key over
                    await rival.consume(await rival.claim(job, "w"))
                    fresh.append(job.id)
                return await original(ops, **kwargs)

            collector.backend.zk.multi = multi  # type: ignore[method-assign]
            await collect_keys(collector.backend.zk, collector.backend._paths, retention, time.time())
            assert fresh
            assert (await rival.post("x", key="k")).id == fresh[0]  # settled a moment ago


async def test_cancel_refused_by_a_node_it_must_create_is_a_board_conflict(zk_hosts: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(zk_hosts, session_timeout=6)) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            job = await board.post("x")
            stray = f"{board.backend.options.root}/trash/{job.id}"  # as another tool (or an old bug) left it
            assert (await board.backend.zk.multi([Create(stray, b"\x01")])).ok
            with pytest.raises(BoardConflict, match="NodeExists"):
                await board.cancel(job, "unwanted")
            assert await board.job_count() == 1


@pytest.mark.parametrize("how", ["trash", "cancel"])
async def test_trashing_a_diamond_trashes_the_shared_dependent_once(zk_hosts: str, how: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(zk_hosts, session_timeout=6)) as board:
            root = await board.post("root")
            left = await board.post("left", depends_on=[root])
            right = await board.post("right", depends_on=[root])
            bottom = await board.post("bottom", depends_on=[left, right], key="bottom")
            if how == "trash":
                await board.trash(await board.claim(root, "w"), "bad")
            else:
                await board.cancel(root, "unwanted")
            assert await board.job_count() == 0
            assert sorted([t.job.name async for t in board.trashed()]) == ["bottom", "left", "right", "root"]
            assert (await board.post("bottom", key="bottom")).id == bottom.id


async def test_a_post_lost_five_times_is_reported_as_transient(zk_hosts: str) -> None:
    """Each try's request is lost before the server saw it: the marker is absent, the post is
    sent again; after ``RACE_RETRIES`` tries ``Poster.post`` raises InvalidJob ("its
    dependencies or key kept changing"), although the job is valid and nothing changed."""
    with anyio.fail_after(40):
        async with open_board(board_url(zk_hosts, session_timeout=6)) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            zk = board.backend.zk
            original = zk._send
            lost = [0]

            async def send(request: Any, *, retry: bool) -> Any:
                if isinstance(request, protocol.TransactionRequest) and not retry and lost[0] < 5:
                    lost[0] += 1  # as if the connection broke before the request reached the server
                    zk._abort_connection()
                    raise OutcomeUnknown("request lost (test)")
                return await original(request, retry=retry)

            zk._send = send  # type: ignore[method-assign]
            with pytest.raises(BackendUnavailable):
                await board.post("valid")
            assert lost == [5]
            assert await board.job_count() == 0


async def test_no_marker_flusher_outlives_its_board(zk_hosts: str) -> None:
    with anyio.fail_after(30):
        board = ZooKeeperBoard(board_url(zk_hosts, session_timeout=6))
        await board.open()
        conn = board.backend.zk._session.conn
        original = conn.send
        sent = asyncio.Event()

        def send(request: Any, xid: Any = None) -> Any:
            if isinstance(request, protocol.TransactionRequest) and any(
                    "/jobs/" in op.path for op in request.requests):
                sent.set()  # the post's multi (not the collector's)
            return original(request, xid=xid)

        conn.send = send
        posting = asyncio.create_task(board.post("x"))
        await sent.wait()  # the post's multi is on its way: its reply comes while the board closes
        await board.aclose()
        assert (await posting).name == "x"
        assert board.backend._markers._doomed, "the post's marker was not queued after close() had flushed"
        await anyio.sleep(2.5)
        flusher = board.backend._markers._flusher
        running = flusher is not None and not flusher.done()
        if flusher is not None:
            flusher.cancel()
        assert not running, "the flusher still runs on a closed board"


@pytest.mark.parametrize("how", ["trash", "cancel"])
async def test_a_keyed_job_the_board_accepted_can_be_trashed(zk_hosts: str, how: str) -> None:
    """The post is checked against ``max_posting_bytes``; the trash of a keyed job once wrote the
    posting into ``trash/<id>`` and again into ``keys/<key>``: trash refused its own transaction
    (InvalidJob), cancel sent it and the server dropped the connection, five times."""
    with anyio.fail_after(60):
        async with open_board(board_url(zk_hosts, session_timeout=6)) as board:
            blob = "a" * int(board.max_posting_bytes * 0.6)
            job = await board.post("big", {"blob": blob}, key="big")  # within the limit: accepted
            assert await board.state(job) is JobState.UNCLAIMED
            if how == "trash":
                await board.trash(await board.claim(job, "w"), "bad")
            else:
                await board.cancel(job, "unwanted")
            assert await board.job_count() == 0 and await board.state(job) is JobState.TRASHED
