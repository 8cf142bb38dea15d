"""postgresql:// under faults: connections terminated under load, and calls retried after a lost reply.

- ``pg_terminate_backend`` of the boards' connections (pool and session), every 0.1-0.3 s for 8 s,
  while two boards' claimers consume 300 jobs: every job consumed exactly once by a consume that
  returned normally, none lost, none trashed, no consume reported applied twice.
- A call whose reply was lost is sent again marked as a retry (what ``Database.run`` does after a
  transient failure): the post finds its job by its token, the claim its claim by its nonce, the
  consume its evidence. Sent again unmarked, the consume would say ``ClaimLost`` of its own write.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import time
import uuid
from collections import Counter
from typing import Any

import anyio
import asyncpg
import pytest

from jobboard import JobBoard, JobState, NewJob, open_board
from jobboard.backend import Prepared
from jobboard.errors import BackendUnavailable, ClaimLost, InvalidURL
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(90)


async def test_terminated_connections_under_load_lose_nothing_and_consume_nothing_twice(
    postgresql_url: str,  # noqa: F811
) -> None:
    tag = f"faults-{uuid.uuid4().hex[:8]}"
    board = f"board={tag}&session_timeout=2&reap_interval=0.2"
    consumed: Counter[str] = Counter()
    jobs: set[str] = set()
    kills = [0]
    async with open_board(f"{postgresql_url}?{board}") as poster, \
            open_board(f"{postgresql_url}?{board}&application_name={tag}") as one, \
            open_board(f"{postgresql_url}?{board}&application_name={tag}") as two:
        admin = await asyncpg.connect(postgresql_url)
        done = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(kill_for, admin, tag, 6.0, kills)
                for claiming in (one, two, one, two):
                    group.start_soon(claimer, claiming, consumed, done)
                for n in range(400):  # a steady stream while the connections are cut
                    jobs.add((await poster.post("work", {"n": n})).id)
                    await anyio.sleep(0.015)
                await until_all_consumed(poster, jobs, consumed)
                done.set()
        finally:
            await admin.close()
        print(f"{kills[0]} connections terminated; {len(consumed)} jobs consumed")
        assert kills[0] >= 15
        assert set(consumed) == jobs and max(consumed.values()) == 1
        assert [item async for item in poster.trashed()] == []


async def test_a_pool_of_one_connection_serves_sixteen_claimers_and_a_waiter(
    postgresql_url: str,  # noqa: F811
) -> None:
    """An exhausted pool queues calls, it does not fail them: waits and watches hold no connection."""
    url = f"{postgresql_url}?board=pool-{uuid.uuid4().hex}&pool_size=1"
    consumed: Counter[str] = Counter()
    async with open_board(url) as board, open_board(url) as watcher:
        jobs = {job.id for job in await board.post_many([NewJob("work") for _ in range(200)])}
        done = anyio.Event()
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for _ in range(16):
                    group.start_soon(claimer, board, consumed, done)
                group.start_soon(watcher.wait_for_completion, max(jobs, key=int))
                await until_all_consumed(board, jobs, consumed)
                done.set()
        assert set(consumed) == jobs and max(consumed.values()) == 1


async def test_a_missing_database_is_a_wrong_url_and_a_refusing_server_is_unavailable(
    postgresql_url: str,  # noqa: F811
) -> None:
    """Permanent errors are not retried nor disguised; transient ones are retried for connect_timeout."""
    missing = postgresql_url.rsplit("/", 1)[0] + f"/no_such_db_{uuid.uuid4().hex[:6]}?board=x"
    with anyio.fail_after(5), pytest.raises(InvalidURL, match="3D000"):
        await open_board(missing).__aenter__()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    started = time.monotonic()
    with anyio.fail_after(10), pytest.raises(BackendUnavailable):
        await open_board(f"postgresql://postgres@127.0.0.1:{port}/postgres?board=x&connect_timeout=1").__aenter__()
    assert 0.5 < time.monotonic() - started < 5  # tried for about connect_timeout, not once


async def kill_for(admin: asyncpg.Connection, tag: str, seconds: float, kills: list[int]) -> None:
    """Terminate one or two of the connections named ``tag`` every 0.1-0.3 s for ``seconds``."""
    with anyio.move_on_after(seconds):
        while True:
            await anyio.sleep(0.1 + random.random() * 0.2)
            kills[0] += await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity "
                "WHERE application_name = $1 ORDER BY random() LIMIT 2) victims", tag)


async def until_all_consumed(poster: JobBoard, jobs: set[str], consumed: Counter[str]) -> None:
    with anyio.fail_after(60):
        for _ in itertools.count():  # polled: the claimers' counts are plain data
            if jobs <= set(consumed) and not await poster.job_count():
                return
            await anyio.sleep(0.05)


async def claimer(board: JobBoard, consumed: Counter[str], done: anyio.Event) -> None:
    """Claim and consume until ``done``, counting the consumes that returned normally."""
    while not done.is_set():
        try:
            claim = await board.claim_next("w")
            if claim is None:
                with anyio.move_on_after(0.2):
                    await board.wait()
                continue
            await anyio.sleep(random.random() * 0.002)
            await board.consume(claim)
            consumed[claim.job.id] += 1
        except (ClaimLost, BackendUnavailable):
            continue  # its session was cut: the job comes back


@pytest.fixture
async def backend(postgresql_url: str) -> Any:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=replies-{uuid.uuid4().hex}") as board:
        assert isinstance(board.backend, PostgresBackend)
        yield board.backend


async def test_a_post_sent_again_after_a_lost_reply_finds_its_job(backend: PostgresBackend) -> None:
    from jobboard.board.codec import build_posting, encode_posting

    posting = build_posting("once", {}, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                            created_at=0.0)
    prepared = Prepared(posting, encode_posting(posting))
    writer = backend.writer
    assert backend.db.pool is not None
    first = await backend.db.pool.fetchrow(writer.post_call(), *writer.post_args(prepared, False))  # reply "lost"
    again = await backend.db.pool.fetchrow(writer.post_call(), *writer.post_args(prepared, True))
    assert again["r_id"] == first["r_id"]
    assert await backend.job_count() == 1


async def test_a_claim_and_a_consume_sent_again_after_a_lost_reply_find_their_effect(
    backend: PostgresBackend,
) -> None:
    pool, s, ns, session = backend.db.pool, f'"{backend.options.schema}"', backend.options.ns, backend.writer.session_id
    assert pool is not None
    board = backend.options.board
    for _ in range(2):
        await pool.fetchrow(backend.writer.post_call(),
                            *backend.writer.post_args(_prepared(), False))
    nonce = str(uuid.uuid4())
    claim_next = f"SELECT * FROM {s}.claim_next($1, $2, $3, 'w', NULL, $4::uuid, $5)"
    first = await pool.fetchrow(claim_next, board, ns, session, nonce, False)  # reply "lost"
    again = await pool.fetchrow(claim_next, board, ns, session, nonce, True)
    assert (again["r_id"], again["r_gen"]) == (first["r_id"], first["r_gen"])  # not a second job
    assert await pool.fetchval(f"SELECT count(*) FROM {s}.job WHERE board = $1 AND state = 1", board) == 1
    consume = f"SELECT * FROM {s}.consume($1, $2, $3, $4, $5, 'w', '\\xc0'::bytea, $6)"
    assert (await pool.fetchrow(consume, board, ns, session, first["r_id"], first["r_gen"], False))["r_status"] == 0
    retried = await pool.fetchrow(consume, board, ns, session, first["r_id"], first["r_gen"], True)
    unmarked = await pool.fetchrow(consume, board, ns, session, first["r_id"], first["r_gen"], False)
    assert (retried["r_status"], unmarked["r_status"]) == (0, 1)  # applied (its evidence), and stale otherwise
    await asyncio.sleep(0)


def _prepared() -> Prepared:
    from jobboard.board.codec import build_posting, encode_posting

    posting = build_posting("x", {}, priority=0, depends_on=(), max_attempts=None, keep_result=False, created_at=0.0)
    return Prepared(posting, encode_posting(posting))


class ReplyDropper:
    """A loopback proxy to PostgreSQL that, when armed, forwards the next request of a pooled connection and
    drops its reply (the server applied the write; the client hears a reset). Connection 1 of a board is its
    session connection (connection 0 is the pool's first): it is never armed."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port, self.accepted = target_port, 0, 0
        self.state = "idle"
        self.dropped = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def arm(self) -> None:
        self.state, self.dropped = "armed", asyncio.Event()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index, self.accepted = self.accepted, self.accepted + 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def requests() -> None:
            while data := await reader.read(65536):
                if index != 1 and self.state == "armed":
                    self.state = f"sent on {index}"
                up_writer.write(data)
                await up_writer.drain()

        async def replies() -> None:
            while data := await up_reader.read(65536):
                if self.state == f"sent on {index}":
                    self.state = "idle"
                    writer.transport.abort()  # the reply never reaches the client
                    up_writer.transport.abort()
                    self.dropped.set()
                    return
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.ensure_future(requests()), asyncio.ensure_future(replies())]
        with contextlib.suppress(OSError):
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)  # either side closing ends both
        for pump in pumps:
            pump.cancel()
        writer.transport.abort()
        up_writer.transport.abort()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()


async def test_a_consume_and_a_post_whose_replies_are_lost_are_applied_once_and_said_so(
    postgresql_url: str,  # noqa: F811
) -> None:
    proxy = ReplyDropper(int(postgresql_url.rsplit(":", 1)[1].split("/", 1)[0]))
    await proxy.start()
    try:
        url = (f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?board=replies-{uuid.uuid4().hex}"
               "&pool_size=1&reap_interval=60")
        async with open_board(url) as board:
            await board.consume(await board.claim(await board.post("warm"), "w"))  # statements prepared:
            job = await board.post("x")  # the armed request is then the call itself, not its Parse
            claim = await board.claim(job, "w")
            proxy.arm()
            with anyio.fail_after(10):
                await board.consume(claim)  # applied, reply lost: the retry finds its evidence
            assert proxy.dropped.is_set(), "no reply was dropped"
            assert await board.state(job) is JobState.COMPLETE
            warm = await board.post("warm")  # on the pool's new connection
            proxy.arm()
            with anyio.fail_after(10):
                posted = await board.post("y")  # written, reply lost: the retry finds it by its token
            assert proxy.dropped.is_set()
            assert [j.id async for j in board.iterjobs()] == [warm.id, posted.id]
    finally:
        await proxy.aclose()
