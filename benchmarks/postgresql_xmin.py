"""A transaction that pins the xmin horizon, under churn: how a postgresql:// board slows, and recovers.

    python -m benchmarks.postgresql_xmin --url postgresql://postgres@127.0.0.1:5432/postgres --hold 60

A poster posts ``--rate`` jobs a second while 4 claimers consume them. After ``--before`` seconds another
connection opens a ``REPEATABLE READ`` transaction, reads the job table (its snapshot now holds back
vacuum on every table) and stays idle in it for ``--hold`` seconds, then commits; the run goes on for
``--after`` seconds. Every 5 seconds one JSON line: the phase, the jobs consumed in those 5 s, the median
claim + consume time of one claimer (ms), the job table's dead tuples and size. Last line: per phase,
the median of those figures.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from typing import Any

import asyncpg

from benchmarks.common import print_json_of
from jobboard import NewJob, open_board
from jobboard_postgresql import PostgresBackend


async def run(url: str, rate: int, before: float, hold: float, after: float) -> dict[str, Any]:
    board_url = f"{url}{'&' if '?' in url else '?'}board=xmin-{uuid.uuid4().hex[:8]}"
    phase, done, cycles = "before", 0, []
    lines: list[dict[str, Any]] = []
    async with open_board(board_url) as poster, open_board(board_url) as worker:
        backend = poster.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        schema, dsn = backend.options.schema, backend.options.dsn
        stop = time.monotonic() + before + hold + after

        async def post() -> None:
            while time.monotonic() < stop:
                started = time.monotonic()
                await poster.post_many([NewJob("churn") for _ in range(rate // 10)])
                await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - started)))

        async def claim(timed: bool) -> None:
            nonlocal done
            while time.monotonic() < stop:
                started = time.perf_counter()
                claim = await worker.claim_next("x")
                if claim is None:
                    await asyncio.sleep(0.01)
                    continue
                await worker.consume(claim)
                done += 1
                if timed:
                    cycles.append(time.perf_counter() - started)

        async def pin() -> None:
            nonlocal phase
            await asyncio.sleep(before)
            holder = await asyncpg.connect(dsn)
            transaction = holder.transaction(isolation="repeatable_read")
            await transaction.start()
            await holder.fetchval(f'SELECT count(*) FROM "{schema}".job')
            phase = "held"
            await asyncio.sleep(hold)
            await transaction.commit()
            await holder.close()
            phase = "after"

        async def sample() -> None:
            nonlocal done
            while time.monotonic() < stop:
                await asyncio.sleep(5)
                assert backend.db.pool is not None
                row = await backend.db.pool.fetchrow(
                    "SELECT n_dead_tup, pg_total_relation_size(relid) AS bytes FROM pg_stat_user_tables "
                    "WHERE schemaname = $1 AND relname = 'job'", schema)
                line = {"phase": phase, "consumed_per_s": done / 5,
                        "cycle_ms": round(statistics.median(cycles) * 1000, 3) if cycles else None,
                        "job_dead": row["n_dead_tup"], "job_kb": row["bytes"] // 1024}
                done = 0
                cycles.clear()
                lines.append(line)
                print(json.dumps(line), flush=True)

        await asyncio.gather(post(), claim(True), claim(False), claim(False), claim(False), pin(), sample())
    return {"summary": {name: {key: statistics.median(line[key] for line in lines if line["phase"] == name
                                                      and line[key] is not None)
                               for key in ("consumed_per_s", "cycle_ms", "job_dead")}
                        for name in ("before", "held", "after") if any(line["phase"] == name for line in lines)}}


if __name__ == "__main__":
    print_json_of("postgresql_xmin", run, rate=500, before=30.0, hold=60.0, after=60.0)
