"""postgresql://: ``post_many``'s plain batches written by ``COPY`` (:mod:`jobboard_postgresql.bulk`): all or
nothing in the board's transaction and in the caller's (rolled back: no job, no event; committed: every job,
ids in order), a delayed posting through ``jb.post_plain``, and a version 17 schema upgraded to 18."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import anyio
import asyncpg
import pytest

from jobboard import InvalidJob, JobBoardError, NewJob, open_board
from jobboard.backend import Posting, Prepared, encode_posting
from jobboard.board.codec import new_token
from jobboard_postgresql import PostgresBackend
from jobboard_postgresql.bulk import CHUNK_BYTES
from jobboard_postgresql.schema import VERSION
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[3]


async def count(connection: asyncpg.Connection, schema: str, board: str) -> tuple[int, int]:
    """The board's job rows and posted event rows."""
    jobs = await connection.fetchval(f'SELECT count(*) FROM "{schema}".job WHERE board = $1', board)
    events = await connection.fetchval(f'SELECT count(*) FROM "{schema}".event WHERE board = $1 AND kind = $2',
                                       board, "posted")
    return int(jobs), int(events)


async def test_a_copied_batch_in_the_callers_transaction_exists_only_after_its_commit(
        postgresql_url: str) -> None:  # noqa: F811
    board_name = f"copy-{uuid.uuid4().hex[:8]}"
    async with open_board(f"{postgresql_url}?board={board_name}") as board:
        assert isinstance(board.backend, PostgresBackend)
        schema = board.backend.options.schema
        async with board.events():  # events are read: the batch's posted events are written with it
            connection = await asyncpg.connect(postgresql_url)
            try:
                transaction = connection.transaction()
                await transaction.start()
                await board.post_many([NewJob("gone", {"n": n}) for n in range(30)], connection=connection)
                assert (await count(connection, schema, board_name))[0] == 30  # seen inside the transaction
                await transaction.rollback()
                assert await count(connection, schema, board_name) == (0, 0)
                async with connection.transaction():
                    jobs = await board.post_many([NewJob("kept", {"n": n}) for n in range(30)], connection=connection)
                assert await count(connection, schema, board_name) == (30, 30)
                ids = [int(job.id) for job in jobs]
                assert ids == sorted(ids) and len(set(ids)) == 30
                assert [job.details["n"] for job in jobs] == list(range(30))
                autocommit = await board.post_many([NewJob("own", {}) for _ in range(5)], connection=connection)
                assert not connection.is_in_transaction()
                assert (await count(connection, schema, board_name))[0] == 35 and min(
                    int(job.id) for job in autocommit) > max(ids)
            finally:
                await connection.close()
        claim = await board.claim_next("w")
        assert claim is not None and claim.job.id == jobs[0].id


async def test_a_batch_the_table_refuses_writes_nothing(postgresql_url: str) -> None:  # noqa: F811
    schema, board_name = f"copy_fail_{uuid.uuid4().hex[:8]}", "b"
    async with open_board(f"{postgresql_url}?board={board_name}&schema={schema}") as board:
        connection = await asyncpg.connect(postgresql_url)
        try:
            await connection.execute(f'ALTER TABLE "{schema}".job ADD CONSTRAINT no_bad CHECK (name <> \'bad\')')
            batch = [NewJob("ok", {}), NewJob("ok", {}), NewJob("bad", {}), NewJob("ok", {})]
            with pytest.raises(JobBoardError):
                await board.post_many(batch)
            assert await count(connection, schema, board_name) == (0, 0)
            with pytest.raises(InvalidJob):  # refused before anything is sent
                await board.post_many([NewJob("ok", {}), NewJob("ok", {"x": object()})])
            assert await count(connection, schema, board_name) == (0, 0)
            assert len(await board.post_many([NewJob("ok", {}) for _ in range(3)])) == 3
        finally:
            await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await connection.close()


async def test_a_delayed_posting_in_a_batch_waits_for_its_time(postgresql_url: str) -> None:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=copy-delay-{uuid.uuid4().hex[:8]}") as board:
        jobs = await board.post_many([NewJob("later", {}, delay=3600), NewJob("now", {})])
        claim = await board.claim_next("w")
        assert claim is not None and claim.job.id == jobs[1].id
        assert await board.claim_next("w") is None


def version_17_ddl(schema: str) -> str:
    """The DDL of schema version 17 (before ``post_head``), from git."""
    base = "backends/postgresql/jobboard_postgresql"
    found: dict[str, object] = {}
    for name in ("flow_sql", "functions", "settles", "schema"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"67a9d23:{base}/{name}.py"], capture_output=True,
                              text=True, check=True).stdout
        exec(text.replace("from jobboard_postgresql.", "# "), found)  # noqa: S102 - the project's own history
    assert found["VERSION"] == 17
    ddl = found["ddl"]
    assert callable(ddl)
    return str(ddl(schema))


async def test_a_version_17_schema_is_upgraded_and_copies(postgresql_url: str) -> None:  # noqa: F811
    try:
        old = version_17_ddl(schema := f"copy_upgrade_{uuid.uuid4().hex[:8]}")
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        pytest.skip(f"no git history here: {error}")
    connection = await asyncpg.connect(postgresql_url)
    try:
        await connection.execute(old)
        await connection.fetchval(f'SELECT "{schema}".post_plain($1, $2, $3, NULL, NULL, $4, NULL, NULL, NULL, $5, '
                                  "NULL)", "b", ["old"], [2], [uuid.uuid4()], [b"\x93not decoded"])
        async with open_board(f"{postgresql_url}?board=b&schema={schema}") as board:
            assert await connection.fetchval(f'SELECT max(version) FROM "{schema}".meta') == VERSION >= 18
            jobs = await board.post_many([NewJob("new", {"n": n}) for n in range(3)])
            assert (await count(connection, schema, "b"))[0] == 4
            old_id = await connection.fetchval(f'SELECT min(id) FROM "{schema}".job WHERE board = $1', "b")
            assert all(int(job.id) > old_id for job in jobs)
    finally:
        await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await connection.close()


async def test_a_cancelled_copy_leaves_all_or_nothing_and_a_board_that_commits(
        postgresql_url: str) -> None:  # noqa: F811
    board_name = f"copy-cancel-{uuid.uuid4().hex[:8]}"
    async with open_board(f"{postgresql_url}?board={board_name}") as board:
        assert isinstance(board.backend, PostgresBackend)
        schema = board.backend.options.schema
        connection = await asyncpg.connect(postgresql_url)
        try:
            for delay in (0.0, 0.002, 0.01, 0.03):  # the cancellation lands wherever it lands: each is all or nothing
                before = (await count(connection, schema, board_name))[0]
                with anyio.move_on_after(delay):
                    await board.post_many([NewJob("big", {"n": n}) for n in range(3000)])
                assert (await count(connection, schema, board_name))[0] - before in (0, 3000)
            job = await board.post("after", {})  # committed: seen by another connection
            assert await connection.fetchval(f'SELECT count(*) FROM "{schema}".job WHERE id = $1', int(job.id)) == 1
        finally:
            await connection.close()


async def test_a_batch_over_one_copy_payload_goes_in_several_and_is_all_or_nothing(
        postgresql_url: str) -> None:  # noqa: F811
    """Postings of 300 KB: 16 of them fill more than one ``COPY`` payload (:data:`CHUNK_BYTES`, 4 MB)."""
    schema, board_name = f"copy_chunks_{uuid.uuid4().hex[:8]}", "b"
    big = "x" * 300_000
    async with open_board(f"{postgresql_url}?board={board_name}&schema={schema}") as board:
        connection = await asyncpg.connect(postgresql_url)
        try:
            assert 16 * len(big) > CHUNK_BYTES
            await connection.execute(f'ALTER TABLE "{schema}".job ADD CONSTRAINT no_bad CHECK (name <> \'bad\')')
            with pytest.raises(JobBoardError):  # refused in the last payload: the first ones go too
                await board.post_many([NewJob("ok", {"big": big, "n": n}) for n in range(15)] + [NewJob("bad", {})])
            assert await count(connection, schema, board_name) == (0, 0)
            jobs = await board.post_many([NewJob("ok", {"big": big, "n": n}) for n in range(16)])
            assert (await count(connection, schema, board_name))[0] == 16
            assert [int(job.id) for job in jobs] == sorted(int(job.id) for job in jobs)
            for job in jobs:
                assert await board.get(job.id) == job
        finally:
            await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await connection.close()


async def test_copied_rows_hold_every_option_and_a_name_the_head_cannot_join(
        postgresql_url: str) -> None:  # noqa: F811
    """Each row's columns as ``jb.post`` writes them (its options, its token as a uuid); a posting whose name
    holds a newline (none the board checks does) takes the head's array form."""
    async with open_board(f"{postgresql_url}?board=copy-cols-{uuid.uuid4().hex[:8]}") as board:
        assert isinstance(board.backend, PostgresBackend)
        batch = [NewJob("a", {"n": 1}, priority="high", max_attempts=5, keep_result=True, result_ttl=3.5,
                        trash_ttl=7.0, group="g"), NewJob("b", None), NewJob("a", {"n": 2})]
        jobs = await board.post_many(batch)
        assert [await board.get(job.id) for job in jobs] == jobs
        assert (jobs[0].max_attempts, jobs[0].keep_result, jobs[0].result_ttl, jobs[0].group) == (5, True, 3.5, "g")
        schema = board.backend.options.schema
        connection = await asyncpg.connect(postgresql_url)
        try:
            rows = await connection.fetch(f'SELECT id, name, rank, max_attempts, keep_result, result_ttl, trash_ttl, '
                                          f'grp, token FROM "{schema}".job WHERE id = any($1::bigint[]) ORDER BY id',
                                          [int(job.id) for job in jobs])
            assert [tuple(row.values())[1:8] for row in rows] == [
                ("a", 1, 5, True, 3.5, 7.0, "g"), ("b", 2, None, False, None, None, None),
                ("a", 2, None, False, None, None, None)]
            assert all(isinstance(row["token"], uuid.UUID) for row in rows)
            odd = Posting("two\nlines", {}, token=new_token())
            [job] = await board.backend.post_many([Prepared(odd, encode_posting(odd))])
            assert job.name == "two\nlines" and (await board.get(job.id)).name == "two\nlines"
        finally:
            await connection.close()
