"""Dead tuples of a postgresql:// board under sustained churn (a queue's classic bloat).

    python -m benchmarks.postgresql_bloat --url postgresql://postgres@127.0.0.1:5432/postgres --seconds 600

A poster posts ``--rate`` jobs a second (post_many every 0.1 s) while 4 claimers consume them; every
``--every`` seconds one JSON line gives, per table of the board's schema, live and dead tuples (the
statistics collector's ``n_live_tup``/``n_dead_tup``), its size on disk, and the jobs done so far. The
last line is a summary: the dead tuples of the hot table at each sample after the first minute, and
whether they trend up (a least-squares slope in tuples per minute).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from benchmarks.common import print_json_of
from jobboard import NewJob, open_board
from jobboard_postgresql import PostgresBackend

TABLES = ("job", "event", "done", "session", "key")


async def churn(url: str, seconds: float, rate: int, every: float) -> dict[str, Any]:
    board_url = f"{url}{'&' if '?' in url else '?'}board=bloat-{uuid.uuid4().hex[:8]}"
    done = 0
    samples: list[dict[str, Any]] = []
    async with open_board(board_url) as poster, open_board(board_url) as worker:
        backend = poster.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        schema = backend.options.schema
        stop = time.monotonic() + seconds

        async def post() -> None:
            while time.monotonic() < stop:
                started = time.monotonic()
                await poster.post_many([NewJob("churn") for _ in range(rate // 10)])
                await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - started)))

        async def claim() -> None:
            nonlocal done
            while time.monotonic() < stop:
                claim = await worker.claim_next("bloat")
                while claim is not None:
                    done += 1
                    claim = await worker.consume_and_claim_next(claim, None)
                try:
                    await asyncio.wait_for(worker.wait(), 0.5)
                except TimeoutError:
                    continue

        async def sample() -> None:
            started = time.monotonic()
            while time.monotonic() < stop:
                await asyncio.sleep(every)
                assert backend.db.pool is not None
                rows = await backend.db.pool.fetch(
                    "SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid) AS bytes, "
                    "autovacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY($2)",
                    schema, list(TABLES))
                line = {"t": round(time.monotonic() - started), "jobs_done": done,
                        **{row["relname"]: {"live": row["n_live_tup"], "dead": row["n_dead_tup"],
                                            "kb": row["bytes"] // 1024, "autovacuums": row["autovacuum_count"]}
                           for row in rows}}
                samples.append(line)
                print(json.dumps(line), flush=True)

        await asyncio.gather(post(), claim(), claim(), claim(), claim(), sample())
    late = [(s["t"] / 60, s["job"]["dead"]) for s in samples if s["t"] >= 60 and "job" in s]
    return {"summary": True, "rate": rate, "seconds": seconds, "done": done,
            "job_dead_after_1min": [d for _, d in late], "job_dead_slope_per_min": round(slope(late), 1),
            "job_dead_max": max((d for _, d in late), default=0)}


def slope(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


if __name__ == "__main__":
    print_json_of("postgresql_bloat", churn, seconds=600.0, rate=500, every=15.0)
