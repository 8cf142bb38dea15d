"""Review of postgresql:// ``post_many`` by binary COPY (40c8257, 82391b2): the guarantees a copied batch must
keep (applied once when the COMMIT's reply is lost, all or nothing when cancelled, the caller's SQLAlchemy
transaction, a waiting worker woken at the commit, ids ascending in input order). A bug found would be a
case marked ``xfail(strict=True)`` naming it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import BoardConflict, JobNotFound
from jobboard.job import Job
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)


class CommitReplyDropper:
    """A loopback proxy to PostgreSQL that, when armed, forwards the next request holding ``COMMIT`` and drops
    its reply (the transaction committed; the client hears a reset)."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, 0
        self.armed, self.sent = False, False
        self.dropped = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        mine = False

        async def requests() -> None:
            nonlocal mine
            while data := await reader.read(65536):
                if self.armed and b"COMMIT" in data.upper():
                    self.armed, self.sent, mine = False, True, True
                up_writer.write(data)
                await up_writer.drain()

        async def replies() -> None:
            while data := await up_reader.read(65536):
                if mine:
                    writer.transport.abort()  # the COMMIT's reply never reaches the client
                    up_writer.transport.abort()
                    self.dropped.set()
                    return
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.ensure_future(requests()), asyncio.ensure_future(replies())]
        with contextlib.suppress(OSError):
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        writer.transport.abort()
        up_writer.transport.abort()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


async def listed_ids(board: JobBoard) -> list[str]:
    return [job.id async for job in board.iterjobs()]


async def test_a_copied_batch_whose_commit_reply_is_lost_is_posted_once(postgresql_url: str) -> None:  # noqa: F811
    """The COMMIT of a copied batch applied, its reply lost: the retry (``jb.post_many`` by token) finds every
    job; none is posted twice, and the ids returned are the rows'."""
    proxy = CommitReplyDropper(port_of(postgresql_url))
    await proxy.start()
    try:
        url = (f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?board=copyreply-{uuid.uuid4().hex[:8]}"
               "&pool_size=1&reap_interval=60")
        async with open_board(url) as board:
            await board.post_many([NewJob("warm")])
            proxy.armed = True
            with anyio.fail_after(20):
                jobs = await board.post_many([NewJob("x", {"n": n}) for n in range(40)])
            assert proxy.sent and proxy.dropped.is_set(), "no COMMIT reply was dropped"
            ids = await listed_ids(board)
            assert len(ids) == 41 and len(set(ids)) == 41
            assert [job.id for job in jobs] == ids[1:]
            assert [job.details["n"] for job in jobs] == list(range(40))
    finally:
        await proxy.aclose()


async def test_a_cancelled_copy_writes_all_or_nothing_and_leaves_the_pool_usable(
        postgresql_url: str) -> None:  # noqa: F811
    """Bulk posts cancelled at several points of their copy on a pool of one connection: whole batches only, as
    another board counts them; the board's next posts commit (seen from that other board), so no cancelled
    transaction is left open on the pooled connection (4d14679 fixed one that was)."""
    size = 2000
    url = f"{postgresql_url}?board=copycancel-{uuid.uuid4().hex[:8]}"
    async with open_board(f"{url}&pool_size=1") as board, open_board(url) as other:
        returned: list[list[Job]] = []
        for limit in (0.0005, 0.003, 0.01, 0.03, 0.1):
            with anyio.move_on_after(limit):
                returned.append(await board.post_many([NewJob("c", {"n": n}) for n in range(size)]))
        with anyio.fail_after(20):
            count = await other.job_count()
            assert count % size == 0 and count // size >= len(returned)  # whole batches only
            after = await board.post_many([NewJob("after") for _ in range(3)])
            single = await board.post("single")
            assert len(after) == 3 and await other.job_count() == count + 4
            assert (await other.get(single.id)).name == "single"


async def test_a_copied_batch_first_in_a_sqlalchemy_transaction_follows_it(postgresql_url: str) -> None:  # noqa: F811
    """The batch is the transaction's first statement (SQLAlchemy begins the driver's transaction lazily): a
    rollback leaves no job, a commit every job, and a waiting worker is woken only then."""
    from sqlalchemy.ext.asyncio import create_async_engine

    url = f"{postgresql_url}?board=copysqla-{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(postgresql_url.replace("postgresql://", "postgresql+asyncpg://"))
    try:
        async with open_board(url) as poster, open_board(url) as worker:
            with pytest.raises(RuntimeError, match="roll back"):
                async with engine.begin() as connection:
                    await poster.post_many([NewJob("ship", {"n": n}) for n in range(20)], connection=connection)
                    raise RuntimeError("roll back")
            assert await worker.job_count() == 0
            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    woken: list[list[Job]] = []

                    async def wait() -> None:
                        woken.append(await worker.wait())

                    group.start_soon(wait)
                    await anyio.sleep(0.2)
                    async with engine.begin() as connection:
                        jobs = await poster.post_many([NewJob("ship", {"n": n}) for n in range(20)],
                                                      connection=connection)
                        await anyio.sleep(0.2)
                        assert woken == [] and await worker.job_count() == 0
            assert woken and woken[0]
            assert await listed_ids(worker) == [job.id for job in jobs]
            assert [int(job.id) for job in jobs] == sorted(int(job.id) for job in jobs)
    finally:
        await engine.dispose()


async def test_concurrent_copied_batches_keep_their_input_order_and_odd_text(postgresql_url: str) -> None:  # noqa: F811
    """Four batches at once from two boards: each batch's ids ascend in input order, none shared; details with
    NUL bytes and any characters, and groups and names with quotes, commas and braces, are read back as posted."""
    url = f"{postgresql_url}?board=copyodd-{uuid.uuid4().hex[:8]}"
    odd = {"s": "x\x00y'\"\\,{}\ttab\né", "b": b"\x00\xff"}
    async with open_board(url) as one, open_board(url) as two:
        with anyio.fail_after(30):
            batches = await asyncio.gather(*(
                board.post_many([NewJob("a'b,c{d}\"e", {**odd, "n": n}, group="g,{x}\"'\\") for n in range(300)])
                for board in (one, two, one, two)))
            for jobs in batches:
                ids = [int(job.id) for job in jobs]
                assert ids == sorted(ids) and [job.details["n"] for job in jobs] == list(range(300))
            assert len({job.id for jobs in batches for job in jobs}) == 1200
            read = await two.get(batches[0][7].id)
            assert (read.name, read.group, read.details) == ("a'b,c{d}\"e", "g,{x}\"'\\", {**odd, "n": 7})


async def test_a_reader_sees_every_posted_event_of_a_long_copy_beside_short_commits(
        postgresql_url: str) -> None:  # noqa: F811
    """A copied batch's events are written at its start and committed at its end; single posts committed
    meanwhile (later event rows, earlier commits) must not make the reader skip the batch's events."""
    from jobboard import EventKind
    from jobboard_postgresql import PostgresBackend

    url = f"{postgresql_url}?board=copyevents-{uuid.uuid4().hex[:8]}"
    async with (open_board(url) as poster, open_board(url) as single, open_board(url) as watcher,
                watcher.events(maxlen=100_000) as stream):
        assert isinstance(watcher.backend, PostgresBackend) and watcher.backend.feed is not None
        with anyio.fail_after(10):
            await watcher.backend.feed.ready.wait()
        singles: list[Job] = []

        async def post_singles() -> None:
            for n in range(40):
                job = await single.post("single", {"n": n})
                singles.append(job)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(post_singles)
                batches = [await poster.post_many([NewJob("bulk", {"n": n}) for n in range(3000)])
                           for _ in range(2)]
            expected = {job.id for jobs in batches for job in jobs} | {job.id for job in singles}
        seen: set[str] = set()
        with anyio.move_on_after(20):
            async for event in stream:
                if event.kind is EventKind.POSTED:
                    seen.add(str(event.job_id))
                if seen >= expected:
                    break
        assert seen == expected, f"{len(expected - seen)} posted events never read"


async def test_a_cancelled_copy_on_the_callers_connection_leaves_no_transaction_open(
        postgresql_url: str) -> None:  # noqa: F811
    """The caller's connection outside a transaction: each cancelled bulk post leaves it outside one, and a post
    through it afterwards commits (another board sees it), as with jb.post_plain's single statement before."""
    import asyncpg

    url = f"{postgresql_url}?board=copycaller-{uuid.uuid4().hex[:8]}"
    async with open_board(url) as board, open_board(url) as other:
        lost: list[str] = []
        for limit in (0.0, 0.001, 0.002, 0.004, 0.008):
            connection = await asyncpg.connect(postgresql_url)
            try:
                with anyio.move_on_after(limit):
                    await board.post_many([NewJob("c", {"n": n}) for n in range(500)], connection=connection)
                with anyio.fail_after(10):
                    in_transaction = connection.is_in_transaction()
                    try:
                        single = await board.post("single", connection=connection)
                        await other.get(single.id)
                    except (JobNotFound, BoardConflict) as error:
                        lost.append(f"{limit} s (in a transaction: {in_transaction}): {type(error).__name__}")
            finally:
                connection.terminate()
        assert lost == [], f"the caller's next post after a cancelled copy was not committed: {lost}"
