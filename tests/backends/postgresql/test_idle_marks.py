"""postgresql://: a woken ``wait()`` marks its session busy without waiting for the write; a mark asked for
later (the next ``wait()`` marking it idle) must still be the one the row ends with, never the earlier
one landing late (a session left marked busy while it sleeps would get no wake-up until its idle poll).
"""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import pytest

from jobboard import JobBoard, open_board
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(30)


async def marked_idle(backend: PostgresBackend, session_id: int) -> bool:
    async def call(connection: asyncpg.Connection, retry: bool) -> bool:
        return bool(await connection.fetchval(
            f'SELECT idle_since IS NOT NULL FROM "{backend.options.schema}".session WHERE id = $1', session_id))

    return bool(await backend.db.run("read the idle mark", call))


async def test_a_busy_mark_written_late_never_overwrites_a_newer_idle_mark(postgresql_url: str) -> None:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=marks-{uuid.uuid4().hex}") as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend)
        session = backend.keeper.current()
        with anyio.fail_after(10):
            for _ in range(20):
                await session.set_idle(True)
                session.clear_idle()  # not awaited: its UPDATE has not even been sent yet
                await session.set_idle(True)  # the newer mark
                await session.marks_written()
                assert session.idle and await marked_idle(backend, session.id)
                session.clear_idle()
                await session.marks_written()
                assert not session.idle and not await marked_idle(backend, session.id)


async def test_a_wait_woken_by_its_own_board_is_woken_again_by_another(postgresql_url: str) -> None:  # noqa: F811
    url = f"{postgresql_url}?board=marks-{uuid.uuid4().hex}&idle_poll=30"
    async with open_board(url) as poster, open_board(url) as waiter:
        backend = waiter.backend
        assert isinstance(backend, PostgresBackend)

        async def sleeping_wait(post: JobBoard) -> None:
            """A wait() that marks its session idle and sleeps, ended by ``post`` (idle_poll is 30 s)."""
            async with anyio.create_task_group() as group:
                group.start_soon(waiter.wait)
                while True:  # (bounded by the caller's fail_after)
                    if await marked_idle(backend, backend.keeper.session_id):
                        break
                    await anyio.sleep(0.01)
                await post.post("m")
            claim = await waiter.claim_next("w")
            assert claim is not None
            await waiter.consume(claim)

        with anyio.fail_after(15):
            for _ in range(5):
                await sleeping_wait(waiter)  # woken by its own write: marked busy behind its return
                await sleeping_wait(poster)  # marked idle again at once: only the NOTIFY can end this one
