"""sqlite://'s calls apply in the order they were made (jobboard_sqlite.calls), whichever way each one ran:
inline on the event loop, queued for the write turn another process holds, or on the connection's thread
after SQLite found the file busy. The last way once let the next call, run inline, overtake the one on the
thread (a settle before the claim it settles); the second test looks for that class of bug at random."""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard_sqlite.database import Database

pytestmark = pytest.mark.timeout(60)


def logged(db: Database, index: int) -> Callable[[], None]:
    """A call writing ``index`` into the test's log table (one transaction)."""

    def insert(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO call_order(i) VALUES (?)", (index,))

    return lambda: db.write(insert)


async def applied(db: Database) -> list[int]:
    rows = await db.run(lambda: db.read(lambda conn: conn.execute("SELECT i FROM call_order ORDER BY rowid").fetchall()))
    return [row[0] for row in rows]


def blocker_of(path: Path) -> sqlite3.Connection:
    """Another connection to the file, to hold SQLite's write lock (the board's write then finds it busy)."""
    return sqlite3.connect(str(path), timeout=0, isolation_level=None, check_same_thread=False)


async def take(turn: int, tries: int = 20) -> bool:
    """Take the write turn as another process would, once the board gives it back (``tries`` tries)."""
    for _ in range(tries):
        try:
            fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            await anyio.sleep(0.001)  # the board holds it while it writes (or while its thread writes)
    return False


async def test_a_call_sent_to_the_thread_is_not_overtaken_by_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=t") as board:
        db: Database = board.backend.db  # type: ignore[attr-defined]
        await db.run(lambda: db.write(lambda conn: conn.execute("CREATE TABLE call_order(i INTEGER)")))
        blocker, gate = blocker_of(path), threading.Event()
        turn = os.open(f"{path}-jobboard/write.turn", os.O_RDWR)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            # The connection's thread is slow to start the call (a busy machine): held here until the gate opens.
            db.calls.executor.submit(gate.wait, 20)
            first = db.enqueue(logged(db, 1))
            assert not first.done()  # SQLite found the file busy: the call went to the thread
            blocker.execute("ROLLBACK")  # the file is free again before the thread retried
            second = db.enqueue(logged(db, 2))
            gate.set()
            with anyio.fail_after(20):
                await asyncio.gather(first, second)
                assert await applied(db) == [1, 2]
                assert await take(turn, tries=5000)  # the turn kept for the thread was given back after it
        finally:
            gate.set()
            blocker.close()
            os.close(turn)


async def test_calls_made_in_order_apply_in_order_under_random_busy_and_turn_windows(tmp_path: Path) -> None:
    """One task makes 400 calls without waiting for each, while another connection holds SQLite's lock and
    another open file holds the write turn in random windows; the log shows the calls' order."""
    path = tmp_path / "jobs.db"
    rng = random.Random(os.environ.get("CALL_ORDER_SEED", "26"))
    async with open_board(f"sqlite://{path}?board=t") as board:
        db: Database = board.backend.db  # type: ignore[attr-defined]
        await db.run(lambda: db.write(lambda conn: conn.execute("CREATE TABLE call_order(i INTEGER)")))
        blocker, turn = blocker_of(path), os.open(f"{path}-jobboard/write.turn", os.O_RDWR)
        futures: list[asyncio.Future[None]] = []
        windows = {"busy": 0, "turn": 0}
        try:
            with anyio.fail_after(40):
                for index in range(400):
                    roll = rng.random()
                    if roll < 0.05 and not blocker.in_transaction:
                        try:
                            blocker.execute("BEGIN IMMEDIATE")
                            windows["busy"] += 1
                        except sqlite3.OperationalError:
                            pass  # the board is writing on its thread: no window this time
                    elif roll < 0.10:
                        windows["turn"] += await take(turn)
                    elif roll < 0.25 and blocker.in_transaction:
                        blocker.execute("ROLLBACK")
                    elif roll < 0.40:
                        fcntl.flock(turn, fcntl.LOCK_UN)
                    futures.append(db.enqueue(logged(db, index)))
                    if rng.random() < 0.3:
                        await anyio.sleep(rng.choice([0, 0, 0.0005, 0.002]))
                if blocker.in_transaction:
                    blocker.execute("ROLLBACK")
                fcntl.flock(turn, fcntl.LOCK_UN)
                await asyncio.gather(*futures)
                order = await applied(db)
        finally:
            blocker.close()
            os.close(turn)
        assert windows["busy"] >= 5 and windows["turn"] >= 5, windows
        assert db.calls.thread_calls > 1  # some calls did go to the thread
        assert order == list(range(400))
