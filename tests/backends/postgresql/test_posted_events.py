"""postgresql://: ``post_many``'s plain path (``jb.post_plain``) writes its ``posted`` events only while a board
of that name reads events (the ``observed`` mark its event reader keeps ahead); the other events are never
gated. A reader on another board sees every posted event of a batch posted after its reader started."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import EventKind, NewJob, open_board
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(30)


async def posted_rows(backend: PostgresBackend) -> int:
    assert backend.db.pool is not None
    async with backend.db.pool.acquire() as connection:
        return int(await connection.fetchval(
            f'SELECT count(*) FROM "{backend.options.schema}".event WHERE board = $1 AND kind = $2',
            backend.options.board, "posted"))


async def test_a_bulk_post_writes_posted_events_only_while_they_are_read(postgresql_url: str) -> None:  # noqa: F811
    url = f"{postgresql_url}?board=posted-{uuid.uuid4().hex}"
    async with open_board(url) as poster, open_board(url) as watcher:
        assert isinstance(poster.backend, PostgresBackend) and isinstance(watcher.backend, PostgresBackend)
        await poster.post_many([NewJob("unread", {"n": n}) for n in range(50)])
        assert await posted_rows(poster.backend) == 0  # nobody reads: no event rows
        async with watcher.events() as stream:
            assert watcher.backend.feed is not None
            with anyio.fail_after(10):
                await watcher.backend.feed.ready.wait()
            jobs = await poster.post_many([NewJob("read", {"n": n}) for n in range(50)])
            seen: list[str] = []
            with anyio.fail_after(10):
                async for event in stream:
                    if event.kind is EventKind.POSTED:
                        seen.append(str(event.job_id))
                    if len(seen) == len(jobs):
                        break
        assert seen == [job.id for job in jobs]  # every one, in the batch's order
        assert await posted_rows(poster.backend) == 50
