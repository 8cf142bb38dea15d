"""postgresql:// across a network partition (the suite's TcpProxy paused between the board and the server:
requests go unanswered, no error comes back): every pooled call has a client-side deadline, so a call
ends with ``BackendUnavailable`` after the retry window instead of hanging, a cancelled claim returns,
and a worker stops. Review A's A6 (before: ``post`` hung 30 s, ``claim_next`` could not be cancelled,
a stopped worker still had its claim in flight 30 s later).

The bounds are the documented ones (docs/backends/postgresql.md, "Retries"): a call ends within the
retry window plus one ``call_timeout`` (here 2 + 2 s), given 4 s more on a busy machine."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import JobBoard, JobContext, open_board
from jobboard.errors import BackendUnavailable
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard_postgresql.backend import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)

WINDOW, SESSION = 2.0, 1.0
BOUND = WINDOW + max(WINDOW, SESSION) + 4.0
"""The retry window, one call timeout (the window, at least the session timeout), and 4 s of slack."""


async def nothing(ctx: JobContext) -> None:
    """A handler that does nothing (the worker here only claims)."""


@pytest.fixture
async def partitioned(postgresql_url: str) -> AsyncIterator[tuple[JobBoard, TcpProxy]]:  # noqa: F811
    port = int(postgresql_url.rsplit(":", 1)[1].split("/", 1)[0])
    async with TcpProxy("127.0.0.1", port) as proxy:
        url = (f"postgresql://postgres@{proxy.hosts}/postgres?board=p{uuid.uuid4().hex[:8]}&schema=partition"
               f"&session_timeout={SESSION:g}&retry_window={WINDOW:g}&connect_timeout=2")
        board = open_board(url)
        await board.__aenter__()
        try:
            await board.post("x")
            yield board, proxy
        finally:
            proxy.resume()
            with anyio.move_on_after(10, shield=True):
                await board.__aexit__(None, None, None)


async def test_a_post_across_a_partition_raises_backend_unavailable(partitioned: tuple[JobBoard, TcpProxy]) -> None:
    board, proxy = partitioned
    proxy.pause()
    started = time.monotonic()
    with anyio.move_on_after(30), pytest.raises(BackendUnavailable, match="no answer within 2s"):
        await board.post("y")
    took = time.monotonic() - started
    print(f"post across a partition: ended after {took:.2f}s")
    assert WINDOW <= took < BOUND, f"post across a partition ended after {took:.1f}s"


async def test_a_claim_across_a_partition_can_be_cancelled(partitioned: tuple[JobBoard, TcpProxy]) -> None:
    board, proxy = partitioned
    await board.claim_next("w")  # "x": the next claim finds nothing and would wait in the statement's reply
    proxy.pause()
    started = time.monotonic()
    with anyio.move_on_after(30) as outer:
        with anyio.move_on_after(0.5):
            await board.claim_next("w")
    took = time.monotonic() - started
    print(f"claim_next across a partition, cancelled at 0.5 s: returned after {took:.2f}s")
    assert not outer.cancelled_caught, "claim_next across a partition was not cancelled in 30 s"
    assert took < BOUND, f"a cancelled claim_next across a partition returned after {took:.1f}s"


async def test_a_worker_stops_while_its_server_is_unreachable(partitioned: tuple[JobBoard, TcpProxy]) -> None:
    board, proxy = partitioned
    worker = Worker(board, nothing, WorkerConfig(idle_backoff_max=0.2))
    took: float | None = None
    ended = anyio.Event()
    async with anyio.create_task_group() as group:
        async def run() -> None:
            nonlocal took
            await worker.run()
            took = time.monotonic() - stopped
            ended.set()

        group.start_soon(run)
        await worker.started.wait()
        await anyio.sleep(0.5)
        proxy.pause()
        await anyio.sleep(0.5)
        stopped = time.monotonic()
        worker.stop()
        with anyio.move_on_after(30):
            await ended.wait()
        group.cancel_scope.cancel()
    print(f"worker across a partition: stopped {took}s after stop()")
    # the claim's wait (its statement's end) then the entity's unregistering (2 s), as docs/worker.md says
    assert took is not None, "the worker did not stop within 30 s of stop() across a partition"
    assert took < BOUND + 2, f"the worker stopped {took:.1f}s after stop() across a partition"


async def test_the_pooled_connections_keepalives(partitioned: tuple[JobBoard, TcpProxy]) -> None:
    """What lets the kernel and the server notice a partition: keepalives and a user timeout on the board's
    sockets, the server's own keepalives and its check of a running statement's client."""
    board, _ = partitioned
    backend = board.backend
    assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
    async with backend.db.pool.acquire() as connection:
        sock = connection._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == int(max(WINDOW, SESSION) * 1000)
        assert await connection.fetchval("SHOW client_connection_check_interval") == "1s"
        assert await connection.fetchval("SHOW tcp_keepalives_idle") == "1"
