"""Schema upgrades of a ``sqlite://`` file with processes running on it (review finding F10): an upgrade that
older processes could not run on is refused while they have the file open; a process on a file upgraded under it
stops writing with a permanent error."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BoardConflict
from jobboard_sqlite.schema import SCHEMA_VERSION

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
    """What a file of schema version 2 was: a log of grant times, no ring."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in ("DROP TABLE jb_grant", "ALTER TABLE jb_limit DROP COLUMN ring",
                          "CREATE TABLE jb_grant(board INTEGER NOT NULL, grp TEXT NOT NULL, at REAL NOT NULL)",
                          "CREATE INDEX jb_grant_at ON jb_grant(board, grp, at)", *TO_VERSION_3[:-1],
                          "PRAGMA user_version=2"):
            conn.execute(statement)


TO_VERSION_3 = ["PRAGMA user_version=3"]
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
    older = await asyncio.create_subprocess_exec(sys.executable, "-c", OLDER_PROCESS, str(path),
                                                 str(tmp_path / "older.lock"), stdin=asyncio.subprocess.PIPE,
                                                 stdout=asyncio.subprocess.PIPE)
    try:
        assert older.stdout is not None
        with anyio.fail_after(20):
            assert (await older.stdout.readline()).strip() == b"ready"
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

