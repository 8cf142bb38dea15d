"""postgresql://: a call whose connection is cut while the server still runs it is retried only once that
first attempt is over (``Database.run`` ends its server process first).

A proxy between the board and the server cuts the client's side of the connection carrying a claim, a post
or a consume while the server runs it; the server's side stays open, so the server goes on with it (as
across a partition, or a reply lost on the way). A table lock the test holds keeps that first attempt in
the middle of its transaction: the board's retry then either runs beside it (the bug: both wait for the
lock, and once it is released both go on) or ends it first (the fix: the test releases the lock once the
first attempt's process is gone). Issue 27's anomaly (a lone holder's ``claim_next`` took its group's
second job) is the claim case: the retry skipped the job row its first attempt still held.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import asyncpg
import pytest

from jobboard import JobBoard, JobState, open_board
from jobboard.errors import BackendUnavailable
from jobboard_postgresql.backend import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
U = TypeVar("U")
HOST = "127.0.0.1"


class Cutter:
    """A loopback proxy to PostgreSQL that cuts the client's side of one connection (named by the port the
    server sees it come from) and keeps the server's side open, dropping what the server sends on it."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, 0
        self.clients: dict[int, asyncio.StreamWriter] = {}
        self.upstream: dict[int, asyncio.StreamWriter] = {}
        self.cut_ports: set[int] = set()
        self.holding: set[int] = set()
        """Connections whose client's bytes are kept (in :attr:`held`) instead of forwarded to the server."""
        self.held: dict[int, bytearray] = {}
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self, server_port: int) -> None:
        self.cut_ports.add(server_port)
        self.clients[server_port].transport.abort()

    def deliver(self, server_port: int) -> None:
        """Send the server what was held of a (cut) connection: a request arriving late."""
        self.upstream[server_port].write(bytes(self.held.pop(server_port)))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        port = up_writer.get_extra_info("sockname")[1]
        self.clients[port], self.upstream[port] = writer, up_writer
        up = asyncio.ensure_future(self._pump(reader, up_writer, port, upstream=True))
        down = asyncio.ensure_future(self._pump(up_reader, writer, port))
        self._tasks |= {up, down}
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        if port in self.cut_ports:
            await asyncio.wait([down])  # the server's side lives on until the server or the proxy ends it
        for task in (up, down):
            task.cancel()
        writer.transport.abort()
        up_writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int,
                    upstream: bool = False) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if upstream and port in self.holding:
                    self.held.setdefault(port, bytearray()).extend(data)
                elif port not in self.cut_ports:
                    writer.write(data)
                    await writer.drain()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass
class Setup:
    board: JobBoard
    schema: str
    proxy: Cutter
    url: str
    """The server's own URL (not through the proxy)."""


@pytest.fixture
async def setup(postgresql_url: str) -> AsyncIterator[Setup]:  # noqa: F811
    """A board of its own schema (its table locks block nobody else) whose connections go through a Cutter."""
    proxy = Cutter(int(postgresql_url.rsplit(":", 1)[1].split("/", 1)[0]))
    await proxy.start()
    schema = f"fence_{uuid.uuid4().hex[:12]}"
    try:
        url = f"postgresql://postgres@{HOST}:{proxy.port}/postgres?board=b&schema={schema}&reap_interval=60"
        async with open_board(url) as board:  # no reaper beside the calls: the pool keeps one connection
            yield Setup(board, schema, proxy, postgresql_url)
    finally:
        await proxy.aclose()
        connection = await asyncpg.connect(postgresql_url)
        try:
            with contextlib.suppress(asyncpg.PostgresError):
                await connection.execute("SET lock_timeout = '5s'")
                await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()


async def blocked(watch: asyncpg.Connection, statement: str) -> list[tuple[int, int]]:
    """(pid, client port) of each process waiting for a lock in a statement containing ``statement``."""
    rows = await watch.fetch("SELECT pid, client_port FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND position($1 in query) > 0 AND pid <> pg_backend_pid()", statement)
    return [(row["pid"], row["client_port"]) for row in rows]


async def until(probe: Callable[[], Awaitable[U]]) -> U:
    """``probe()`` (a look at the server's activity: nothing to await instead) every 10 ms until it is true."""
    while True:
        if found := await probe():
            return found
        await asyncio.sleep(0.01)


async def cut_while_blocked(setup: Setup, call: Awaitable[T], lock: str, function: str) -> T:
    """Run ``call`` while holding ``lock`` (a LOCK TABLE of the board's schema); once its statement (a call of
    ``function``) waits for the lock, cut its connection's client side; release the lock once the board's
    retry waits beside it or has returned (the bug), or the first attempt's process is gone (the fix);
    return the call's result."""
    statement = f'"{setup.schema}".{function}('
    holder, watch = await asyncpg.connect(setup.url), await asyncpg.connect(setup.url)
    task: asyncio.Future[T] | None = None
    try:
        with anyio.fail_after(20):
            async with holder.transaction():
                await holder.execute(lock.format(schema=f'"{setup.schema}"'))
                task = asyncio.ensure_future(call)
                (pid, port), = await until(lambda: blocked(watch, statement))
                setup.proxy.cut(port)

                async def retried_or_fenced() -> bool:  # a retry beside the first attempt may end without waiting
                    running = {p for p, _ in await blocked(watch, statement)}
                    return bool(task.done() or running - {pid} or not await watch.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid))

                await until(retried_or_fenced)
            return await task
    finally:
        if task is not None and not task.done():
            task.cancel()
        await holder.close()
        await watch.close()


@pytest.mark.parametrize("lock", ["flow_limit IN ACCESS EXCLUSIVE MODE", "event IN SHARE MODE"])
async def test_a_claim_whose_connection_is_cut_mid_statement_takes_its_groups_first_job_once(
    setup: Setup, lock: str,
) -> None:
    """The first attempt holds job 1's row and waits: for the group's limit (``flow_limit``: the group's
    lock not taken yet) or to log its claim (``event``: the group's lock taken). A retry beside it skipped
    job 1's row and took job 2 of a one-permit group (issue 27's anomaly), or found the group taken and
    claimed nothing, while the first attempt committed a claim that nobody holds."""
    board = setup.board
    await board.set_limit("g", concurrency=1)
    assert await board.claim_next("warm") is None  # jb.flow_next compiled on the pool's one connection
    first, second = await board.post("w", group="g"), await board.post("w", group="g")
    claim = await cut_while_blocked(setup, board.claim_next("holder"), f"LOCK TABLE {{schema}}.{lock}", "claim_next")
    assert claim is not None, "no claim returned (the first attempt's claim held by nobody?)"
    assert claim.job.id == first.id
    assert [(limit.running, limit.waiting) for limit in await board.limits()] == [(1, 1)]
    await board.consume(claim)
    last = await board.claim_next("holder")
    assert last is not None and last.job.id == second.id


async def test_a_post_whose_connection_is_cut_mid_statement_is_written_once(setup: Setup) -> None:
    """The first attempt has written its job and waits to write its event: a retry beside it did not see
    that job (not committed) and wrote another."""
    board = setup.board
    job = await cut_while_blocked(setup, board.post("x"), "LOCK TABLE {schema}.event IN SHARE MODE", "post")
    assert [each.id async for each in board.iterjobs()] == [job.id]


async def test_a_consume_whose_connection_is_cut_mid_statement_is_applied_once_and_said_so(setup: Setup) -> None:
    """The first attempt has consumed the job and waits to write its event: a retry beside it waited for the
    job's row, found it gone once the first committed, and said ``ClaimLost`` of its own consume."""
    board = setup.board
    job = await board.post("x")
    claim = await board.claim(job, "w")
    await cut_while_blocked(setup, board.consume(claim), "LOCK TABLE {schema}.event IN SHARE MODE", "consume")
    assert await board.state(job) is JobState.COMPLETE


async def pooled_port(setup: Setup, watch: asyncpg.Connection) -> int:
    """The proxy's port (as the server sees it) of the board's pooled connection (the pool keeps one)."""
    backend = setup.board.backend
    assert isinstance(backend, PostgresBackend)
    pool = backend.db.pool
    assert pool is not None
    async with pool.acquire() as connection:
        pid = connection.get_server_pid()
    port: int = await watch.fetchval("SELECT client_port FROM pg_stat_activity WHERE pid = $1", pid)
    return port


async def test_a_post_whose_request_reaches_the_server_after_its_retry_is_written_once(setup: Setup) -> None:
    """The other order: the first attempt's request is held on the way (the proxy keeps it) while its
    connection is cut; the retry, on a new connection, writes the job; then the request arrives. Without
    the retry's mark (``retried``) the late first attempt writes the job again."""
    board, proxy = setup.board, setup.proxy
    await board.post("warm")  # the post's statement prepared on the pooled connection: one message to hold
    watch = await asyncpg.connect(setup.url)
    try:
        with anyio.fail_after(20):
            port = await pooled_port(setup, watch)
            proxy.holding.add(port)
            task = asyncio.ensure_future(board.post("x"))
            await until(lambda: asyncio.sleep(0, proxy.held.get(port)))
            proxy.holding.discard(port)
            proxy.cut(port)
            job = await task
            proxy.deliver(port)  # the first attempt's request arrives: its server process runs it now

            async def idle_again() -> bool:  # the late statement ran (or the process is gone)
                state = await watch.fetchval("SELECT state FROM pg_stat_activity WHERE client_port = $1", port)
                return state in (None, "idle")

            await anyio.sleep(0.2)
            await until(idle_again)
        assert [each.id async for each in board.iterjobs()][1:] == [job.id]
    finally:
        await watch.close()


@pytest.fixture(params=["plain", "read_all_stats"])
async def role_setup(request: pytest.FixtureRequest, postgresql_url: str) -> AsyncIterator[Setup]:  # noqa: F811
    """A board whose connections log in as a member of a NOLOGIN group role and switch to it (``?role=``, as
    ``ALTER ROLE ... SET role`` does): the server hides their processes' details from that role (review A,
    A3: the retry fence by ``pg_terminate_backend`` was then a silent no-op, or, with ``pg_read_all_stats``,
    refused with 42501)."""
    tag = uuid.uuid4().hex[:8]
    group, login, schema = f"grp_{tag}", f"lu_{tag}", f"fence_{tag}"
    admin = await asyncpg.connect(postgresql_url)
    await admin.execute(f"CREATE ROLE {group} NOLOGIN; CREATE ROLE {login} LOGIN IN ROLE {group}; "
                        f"GRANT CREATE ON DATABASE postgres TO {group}")
    if request.param == "read_all_stats":
        await admin.execute(f"GRANT pg_read_all_stats TO {group}")
    proxy = Cutter(int(postgresql_url.rsplit(":", 1)[1].split("/", 1)[0]))
    await proxy.start()
    try:
        url = (f"postgresql://{login}@{HOST}:{proxy.port}/postgres?board=b&schema={schema}&reap_interval=60"
               f"&role={group}")
        async with open_board(url) as board:
            yield Setup(board, schema, proxy, postgresql_url)
    finally:
        await proxy.aclose()
        with contextlib.suppress(asyncpg.PostgresError):
            await admin.execute(f'SET lock_timeout = \'5s\'; DROP SCHEMA IF EXISTS "{schema}" CASCADE; '
                                f"DROP OWNED BY {group}, {login}; DROP ROLE {login}; DROP ROLE {group}")
        await admin.close()


async def test_a_post_cut_mid_statement_is_written_once_under_a_login_role(role_setup: Setup) -> None:
    board = role_setup.board
    job = await cut_while_blocked(role_setup, board.post("x"), "LOCK TABLE {schema}.event IN SHARE MODE", "post")
    assert [each.id async for each in board.iterjobs()] == [job.id]


async def test_a_retry_waits_for_a_first_attempt_that_never_ends_only_for_its_window(setup: Setup) -> None:
    """The first attempt stays blocked (the table lock held past the retry window, its server never told
    the client is gone): the retry waits for its fence a second at a time and the call raises
    ``BackendUnavailable`` once the window (2 s) ends; the first attempt then commits alone."""
    url = (f"postgresql://postgres@{HOST}:{setup.proxy.port}/postgres?board=w&schema={setup.schema}"
           "&reap_interval=60&retry_window=2")
    statement = f'"{setup.schema}".post('
    async with open_board(url) as board:
        holder, watch = await asyncpg.connect(setup.url), await asyncpg.connect(setup.url)
        try:
            with anyio.fail_after(30):
                async with holder.transaction():
                    await holder.execute(f'LOCK TABLE "{setup.schema}".event IN SHARE MODE')
                    task = asyncio.ensure_future(board.post("x"))
                    (pid, port), = await until(lambda: blocked(watch, statement))
                    started = asyncio.get_running_loop().time()
                    setup.proxy.cut(port)
                    with pytest.raises(BackendUnavailable):
                        await task
                    took = asyncio.get_running_loop().time() - started

                async def over() -> bool:  # the first attempt committed once the lock was released
                    state = await watch.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
                    return state in (None, "idle")

                await until(over)
            assert [each.name async for each in board.iterjobs()] == ["x"]
            assert took < 8, f"BackendUnavailable {took:.1f}s after the cut (retry_window=2)"
        finally:
            await holder.close()
            await watch.close()


async def test_a_blocked_first_attempt_whose_client_is_gone_ends_within_seconds(setup: Setup) -> None:
    """How long a first attempt whose client vanished holds its fence: the board's connections run with
    ``client_connection_check_interval`` = 1 s, so a statement blocked on a lock ends (and its transaction
    with its locks) within about a second of its client's socket closing, not when the lock comes free."""
    backend = setup.board.backend
    assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
    holder, watch = await asyncpg.connect(setup.url), await asyncpg.connect(setup.url)
    try:
        with anyio.fail_after(20):
            async with holder.transaction():
                await holder.execute("SELECT pg_advisory_xact_lock(4242424242)")
                async with backend.db.pool.acquire() as connection:
                    assert await connection.fetchval("SHOW client_connection_check_interval") == "1s"
                    pid = connection.get_server_pid()
                    blocked_call = asyncio.ensure_future(connection.execute("SELECT pg_advisory_xact_lock(4242424242)"))
                    await until(lambda: watch.fetchval("SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
                                                       "WHERE pid = $1", pid))
                    started = asyncio.get_running_loop().time()
                    setup.proxy.clients[await watch.fetchval(
                        "SELECT client_port FROM pg_stat_activity WHERE pid = $1", pid)].transport.abort()
                    await until(lambda: watch.fetchval("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1", pid))
                    took = asyncio.get_running_loop().time() - started
                    with contextlib.suppress(Exception):
                        await blocked_call
        print(f"a blocked process ended {took:.2f}s after its client's socket closed")
        assert took < 4, f"the blocked process lived {took:.1f}s after its client's socket closed"
    finally:
        await holder.close()
        await watch.close()
