"""Which SQLite driver for sqlite://: the claim cycle through each candidate, same SQL, same file settings.

    python -m benchmarks.sqlite_drivers --jobs 3000 --workers 16 --rounds 5 > docs/benchmarks/sqlite_drivers.json

A cycle is what the backend does per job: a post (``BEGIN IMMEDIATE``; insert; commit), a claim (the best
unclaimed row updated ``RETURNING``) and a consume (a fenced delete), each one transaction, with W
concurrent claimers in one asyncio process. Candidates: ``sqlite3-thread`` (the stdlib module on one
connection driven from one worker thread: what the backend does), ``aiosqlite`` (its own thread per
connection, a request queue: a transaction's three statements are three hops, under a lock), ``apsw-thread`` (APSW on one worker thread), and ``sqlite3-inline`` (the
stdlib module called on the event loop itself: the floor of the thread hop, not a candidate, as a busy
timeout would block the loop; the backend runs a call inline when the connection and the write lock are
free, so ``apsw-inline`` is its APSW counterpart). ``vs_best`` compares a thread variant with the best
thread variant and an inline one with the best inline one. Rounds are interleaved (each round runs every driver once); the JSON
line gives per driver the cycles/s of each round, the median and ``vs_best``.
Drivers not installed (aiosqlite, apsw) are reported as missing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import print_json_of

SCHEMA = (("CREATE TABLE IF NOT EXISTS job(seq INTEGER PRIMARY KEY, rank INTEGER, state INTEGER, gen INTEGER,"
          " owner TEXT, posting BLOB)"), "CREATE INDEX IF NOT EXISTS job_ready ON job(rank, seq) WHERE state=0")
POST = "INSERT INTO job(rank, state, gen, posting) VALUES (2, 0, 0, ?)"
CLAIM = ("UPDATE job SET state=1, gen=gen+1, owner=? WHERE seq=(SELECT seq FROM job WHERE state=0"
         " ORDER BY rank, seq LIMIT 1) RETURNING seq, gen")
CONSUME = "DELETE FROM job WHERE seq=? AND gen=? AND state=1"
PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=10000")
POSTING = os.urandom(120)

Tx = Callable[[str, tuple[Any, ...]], Any]


def _sqlite3_connection(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in (*PRAGMAS, *SCHEMA):
        conn.execute(pragma)
    return conn


def _sqlite3_tx(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    row = conn.execute(sql, params).fetchone()
    conn.execute("COMMIT")
    return row


async def thread_driver(path: str, make: Callable[[str], Any], tx: Callable[..., Any]) -> tuple[Any, Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    conn = await asyncio.wrap_future(pool.submit(make, path))

    async def run(sql: str, params: tuple[Any, ...]) -> Any:
        return await asyncio.wrap_future(pool.submit(tx, conn, sql, params))

    async def close() -> None:
        await asyncio.wrap_future(pool.submit(conn.close))
        pool.shutdown()

    return run, close


def _called_inline(conn: Any, tx: Callable[[Any, str, tuple[Any, ...]], Any]) -> tuple[Any, Any]:
    """A driver that runs each transaction on the event loop itself (no thread hop)."""

    async def run(sql: str, params: tuple[Any, ...]) -> Any:
        return tx(conn, sql, params)

    async def close() -> None:
        conn.close()

    return run, close


async def inline_driver(path: str) -> tuple[Any, Any]:
    return _called_inline(_sqlite3_connection(path), _sqlite3_tx)


async def apsw_inline_driver(path: str) -> tuple[Any, Any]:
    return _called_inline(_apsw_connection(path), _apsw_tx)


async def aiosqlite_driver(path: str) -> tuple[Any, Any]:
    import aiosqlite

    conn = await aiosqlite.connect(path, isolation_level=None)
    for pragma in (*PRAGMAS, *SCHEMA):
        await conn.execute(pragma)

    lock = asyncio.Lock()  # one transaction at a time on the connection: each statement is its own hop

    async def run(sql: str, params: tuple[Any, ...]) -> Any:
        async with lock:
            await conn.execute("BEGIN IMMEDIATE")
            async with conn.execute(sql, params) as cursor:
                row = await cursor.fetchone()
            await conn.execute("COMMIT")
            return row

    return run, conn.close


def _apsw_connection(path: str) -> Any:
    import apsw

    conn = apsw.Connection(path)
    for pragma in (*PRAGMAS, *SCHEMA):
        conn.execute(pragma).fetchall()
    return conn


def _apsw_tx(conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(sql, params).fetchall()
    conn.execute("COMMIT")
    return rows[0] if rows else None


DRIVERS: dict[str, Callable[[str], Any]] = {
    "sqlite3-thread": lambda path: thread_driver(path, _sqlite3_connection, _sqlite3_tx),
    "aiosqlite": aiosqlite_driver,
    "apsw-thread": lambda path: thread_driver(path, _apsw_connection, _apsw_tx),
    "sqlite3-inline": inline_driver,
    "apsw-inline": apsw_inline_driver,
}


async def one_round(driver: str, jobs: int, workers: int) -> float:
    """Cycles/s of ``jobs`` post+claim+consume cycles by ``workers`` concurrent tasks."""
    with tempfile.TemporaryDirectory() as directory:
        run, close = await DRIVERS[driver](os.path.join(directory, "bench.db"))
        left = [jobs]

        async def worker(index: int) -> None:
            while left[0] > 0:
                left[0] -= 1
                await run(POST, (POSTING,))
                claimed = await run(CLAIM, (f"w{index}",))
                if claimed is not None:
                    await run(CONSUME, tuple(claimed))

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(workers)))
        elapsed = time.perf_counter() - started
        await close()
    return jobs / elapsed


def installed(driver: str) -> bool:
    module = {"aiosqlite": "aiosqlite", "apsw-thread": "apsw", "apsw-inline": "apsw"}.get(driver)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def measure(jobs: int, workers: int, rounds: int) -> dict[str, Any]:
    drivers = [d for d in DRIVERS if installed(d)]
    rates: dict[str, list[float]] = {d: [] for d in drivers}
    for _ in range(rounds):
        for driver in drivers:
            rates[driver].append(asyncio.run(one_round(driver, jobs, workers)))
    medians = {d: statistics.median(r) for d, r in rates.items()}
    best = max(v for d, v in medians.items() if not d.endswith("-inline"))
    best_inline = max((v for d, v in medians.items() if d.endswith("-inline")), default=1.0)
    return {
        "benchmark": "sqlite_drivers", "jobs": jobs, "workers": workers, "rounds": rounds,
        "sqlite": sqlite3.sqlite_version, "load": os.getloadavg()[0],
        "missing": [d for d in DRIVERS if d not in drivers],
        "drivers": {d: {"cycles_per_s": [round(r) for r in rates[d]], "median": round(medians[d]),
                        "vs_best": round(medians[d] / (best_inline if d.endswith("-inline") else best), 3)}
                    for d in drivers},
    }


if __name__ == "__main__":
    print_json_of("sqlite_drivers", measure, url=False, jobs=3000, workers=16, rounds=5)
