"""Schema upgrades of a ``sqlite://`` file with processes running on it (review findings F10, F8): an upgrade
that older processes could not run on is refused while they have the file open; a process on a file upgraded
under it stops writing with a permanent error; the version 3 -> 4 upgrade (each key's own expiry) in place."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BoardConflict
from jobboard_sqlite.schema import SCHEMA_VERSION
from tests.backends.sqlite.test_review_s import spawn

pytestmark = pytest.mark.timeout(60)

OLDER_PROCESS = r"""
import fcntl, os, sqlite3, sys, time
db, lock = sys.argv[1], sys.argv[2]
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
conn = sqlite3.connect(db, timeout=10, isolation_level=None)
conn.execute("INSERT INTO jb_session(id, board, pid, started, lock_path) VALUES ('older', 1, ?, ?, ?)",
             (os.getpid(), time.time(), lock))
print("ready", flush=True)
sys.stdin.readline()
"""
"""A session of an older jobboard as it is on the file: its row, and its lock file held while the process lives."""


def as_version_2(path: Path) -> None:
    """What a file of schema version 2 was: a log of grant times, no ring, no key expiry."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in ("DROP TABLE jb_grant", "ALTER TABLE jb_limit DROP COLUMN ring",
                          "CREATE TABLE jb_grant(board INTEGER NOT NULL, grp TEXT NOT NULL, at REAL NOT NULL)",
                          "CREATE INDEX jb_grant_at ON jb_grant(board, grp, at)", *TO_VERSION_3[:-1],
                          "PRAGMA user_version=2"):
            conn.execute(statement)


TO_VERSION_3 = ["DROP INDEX jb_key_expires", "ALTER TABLE jb_key DROP COLUMN expires", "PRAGMA user_version=3"]
"""What a version 4 file loses to be what version 3 was."""


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


async def test_an_upgrade_older_processes_cannot_run_on_waits_until_they_are_gone(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite://{path}?board=b"
    async with open_board(url) as board:
        job = await board.post("w")
    as_version_2(path)
    older = await spawn(OLDER_PROCESS, str(path), str(tmp_path / "older.lock"))
    try:
        with pytest.raises(BoardConflict, match=rf"schema version 2 is open in 1 process\(es\) .*pid {older.pid}\)"):
            async with open_board(url):
                pass
        assert user_version(path) == 2  # left as it was
    finally:
        older.kill()
        with anyio.fail_after(20):
            await older.wait()
    async with open_board(url) as board:  # its lock dropped with it: the upgrade goes on
        assert (await board.get(job.id)).name == "w"
    assert user_version(path) == SCHEMA_VERSION


async def test_a_process_on_a_file_upgraded_under_it_stops_writing_with_a_permanent_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=b") as board:
        await board.post("w")
        with sqlite3.connect(path, isolation_level=None) as conn:  # a newer jobboard upgraded the file
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        started = time.monotonic()
        with pytest.raises(BoardConflict, match=f"changed to schema version {SCHEMA_VERSION + 1} while this process"):
            await board.post("w")
        assert time.monotonic() - started < 5  # not retried as a transient failure
        with sqlite3.connect(path, isolation_level=None) as conn:
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        assert await board.job_count() == 1  # the refused post applied nothing


async def test_a_version_3_file_is_upgraded_in_place_and_its_keys_settled_before_keep_their_retention(
        tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite://{path}?board=b"
    async with open_board(url) as board:
        settled = await board.post("w", key="settled")
        await board.consume(await board.claim(settled, "w"))
        waiting = await board.post("w", key="waiting")
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in TO_VERSION_3:
            conn.execute(statement)
    async with open_board(f"{url}&key_retention=3600") as board:
        assert user_version(path) == SCHEMA_VERSION
        assert (await board.post("w", key="settled")).id == settled.id  # settled by version 3: no expiry of its own
        assert (await board.post("w", key="waiting")).id == waiting.id
        await board.consume(await board.claim(waiting, "w"))
    with sqlite3.connect(path) as conn:
        expiries = dict(conn.execute("SELECT key, expires - settled_at FROM jb_key"))
        assert expiries == {"settled": None, "waiting": 3600.0}
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_results_and_trash_keep_the_ttl_of_the_board_that_wrote_them(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=b"
    async with open_board(f"{url}&result_ttl=3600&trash_ttl=3600") as board:
        kept = await board.post("w", keep_result=True)
        await board.consume(await board.claim(kept, "w"), {"n": 1})
        trashed = await board.post("w")
        await board.trash(await board.claim(trashed, "w"), "no")
    await anyio.sleep(1.1)
    async with open_board(f"{url}&result_ttl=1&trash_ttl=1&key_retention=1") as short:
        await short.purge(older_than=3600)  # sweeps what expired, by each row's own expiry
        assert (await short.wait_for_completion(kept)).result == {"n": 1}
        assert (await short.state(trashed)).value == "trashed"


async def test_an_empty_database_with_a_schema_version_of_its_own_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:  # another program's new database: a version, no table yet
        conn.execute("PRAGMA user_version=7")
    with pytest.raises(BoardConflict, match="is a SQLite database but not a jobboard board"):
        async with open_board(f"sqlite://{path}?board=b"):
            pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
