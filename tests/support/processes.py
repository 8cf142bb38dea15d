"""Child processes for fault tests: started, and ready before the test goes on; stopped where it is safe."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path


def sqlite_writable(db: str | Path, busy_for: float = 0.0) -> bool:
    """Whether a writer can write the SQLite file ``db`` now (``BEGIN IMMEDIATE``, SQLite's busy handler waiting
    up to ``busy_for`` s). A process stopped inside a write transaction holds SQLite's write lock and every writer
    waits for it, a board's reaper included (docs/backends/sqlite.md, the write turn): a test that stops a
    process past its session timeout stops it where this is true."""
    conn = sqlite3.connect(db, timeout=busy_for, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


async def spawn_ready(module: str, *args: str) -> asyncio.subprocess.Process:
    """Run ``python -m module args...`` and wait for the ``ready`` line it prints."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    assert (await child.stdout.readline()).strip() == b"ready"
    return child
