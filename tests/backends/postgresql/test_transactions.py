"""postgresql://: posting and consuming inside the application's own transaction (``connection=``).

After ROLLBACK there is no job (or no consume), after COMMIT there is, and a worker waiting on another
board wakes at the commit (the NOTIFY is the transaction's), with asyncpg, psycopg 3 and SQLAlchemy over both.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import psycopg
import pytest

from jobboard import JobBoard, JobState, NewJob, open_board
from jobboard.errors import Unsupported
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def connection(postgresql_url: str) -> AsyncIterator[asyncpg.Connection]:  # noqa: F811
    """The application's own asyncpg connection (closed after the test)."""
    connection = await asyncpg.connect(postgresql_url)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def boards(postgresql_url: str) -> AsyncIterator[tuple[JobBoard, JobBoard]]:  # noqa: F811
    url = f"{postgresql_url}?board=transactions-{uuid.uuid4().hex}"
    async with open_board(url) as poster, open_board(url) as worker:
        yield poster, worker


async def test_an_asyncpg_transaction_decides_whether_the_job_exists(
    boards: tuple[JobBoard, JobBoard], connection: asyncpg.Connection,
) -> None:
    poster, worker = boards
    async with connection.transaction():
        await connection.execute("CREATE TEMP TABLE orders (n int)")
    transaction = connection.transaction()
    await transaction.start()
    await connection.execute("INSERT INTO orders VALUES (1)")
    job = await poster.post("ship", {"order": 1}, connection=connection)
    assert await worker.job_count() == 0  # not committed: nobody sees it
    await transaction.rollback()
    assert await worker.job_count() == 0 and await worker.state(job) is JobState.COMPLETE
    async with connection.transaction():
        await connection.execute("INSERT INTO orders VALUES (2)")
        jobs = await poster.post_many([NewJob("ship", {"order": 2}), NewJob("bill")], connection=connection)
    assert [j.id for j in await _listed(worker)] == [j.id for j in jobs]


async def test_a_waiting_worker_wakes_at_the_commit(
    boards: tuple[JobBoard, JobBoard], connection: asyncpg.Connection,
) -> None:
    poster, worker = boards
    woken: list[float] = []

    async def wait() -> None:
        await worker.wait()
        woken.append(time.monotonic())

    latencies = []
    for _ in range(5):
        woken.clear()
        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await anyio.sleep(0.2)  # the worker is idle, marked so
            transaction = connection.transaction()
            await transaction.start()
            await poster.post("ship", connection=connection)
            await anyio.sleep(0.2)
            assert woken == [], "the worker woke before the commit"
            committed = time.monotonic()
            await transaction.commit()
        latencies.append(woken[0] - committed)
        claim = await worker.claim_next("w")
        assert claim is not None
        await worker.consume(claim)
    latencies.sort()
    print(f"commit -> wait() returns, median of 5: {latencies[2] * 1000:.1f} ms (max {latencies[-1] * 1000:.1f})")
    assert latencies[2] < 0.25  # milliseconds here; a poll would be idle_poll (1 s)


async def test_a_psycopg_transaction_decides_whether_the_job_exists(
    boards: tuple[JobBoard, JobBoard], postgresql_url: str,  # noqa: F811
) -> None:
    poster, worker = boards
    async with await psycopg.AsyncConnection.connect(postgresql_url) as connection:
        job = await poster.post("ship", connection=connection)  # psycopg opens a transaction
        assert await worker.job_count() == 0
        await connection.rollback()
        assert await worker.state(job) is JobState.COMPLETE and await worker.job_count() == 0
        job = await poster.post("ship", connection=connection)
        await connection.commit()
        assert [j.id for j in await _listed(worker)] == [job.id]


async def test_a_consume_in_the_callers_transaction_is_undone_by_its_rollback(
    boards: tuple[JobBoard, JobBoard], connection: asyncpg.Connection,
) -> None:
    poster, worker = boards
    job = await poster.post("ship", keep_result=True)
    claim = await worker.claim(job, "w")
    transaction = connection.transaction()
    await transaction.start()
    await worker.consume(claim, "shipped", connection=connection)
    await transaction.rollback()
    assert await poster.owner(job) == "w"  # still claimed: the consume never happened
    async with connection.transaction():
        await worker.consume(claim, "shipped", connection=connection)
    outcome = await poster.wait_for_completion(job)
    assert (outcome.state, outcome.result) == (JobState.COMPLETE, "shipped")


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_a_sqlalchemy_transaction_decides_whether_the_job_exists(
    boards: tuple[JobBoard, JobBoard], postgresql_url: str, driver: str,  # noqa: F811
) -> None:
    """The post may be the transaction's first statement (SQLAlchemy begins the driver's transaction lazily)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    poster, worker = boards
    engine = create_async_engine(postgresql_url.replace("postgresql://", f"postgresql+{driver}://"))
    try:
        with pytest.raises(RuntimeError, match="roll back"):
            async with engine.begin() as connection:
                await poster.post("ship", connection=connection)
                raise RuntimeError("roll back")
        assert await worker.job_count() == 0
        async with engine.begin() as connection:
            job = await poster.post("ship", connection=connection)
            assert await worker.job_count() == 0
        assert [j.id for j in await _listed(worker)] == [job.id]
    finally:
        await engine.dispose()


async def test_a_connection_of_another_kind_is_refused(boards: tuple[JobBoard, JobBoard]) -> None:
    poster, worker = boards
    with pytest.raises(Unsupported, match="asyncpg or psycopg"):
        await poster.post("ship", connection=object())
    assert await worker.job_count() == 0


async def _listed(board: JobBoard) -> list[Any]:
    return [job async for job in board.iterjobs()]
