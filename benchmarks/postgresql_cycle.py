"""postgresql:// on one server: the driver choice, the claim cycle, posts, claim cost by backlog, wake-up.

    python -m benchmarks.postgresql_cycle --url postgresql://postgres@127.0.0.1:5432/postgres --runs 3

Prints one JSON object (medians of ``--runs`` runs, with every run's figure):

- ``drivers``: the claim cycle (``claim_next`` then ``consume``, the board's two functions) with W
  connections, through asyncpg and through psycopg 3 (one AsyncConnection per claimer, and the same in
  pipeline mode: both statements of a cycle can not be pipelined, the consume needs the claim's answer,
  so a pipeline only batches the claims of a cycle's... nothing: it is measured to show it);
- ``cycles_per_s``: the board's full cycle, post_many then W claimers ``claim_next`` -> ``consume``;
- ``post_many_per_s``, ``posts_per_s`` (W posters one post at a time);
- ``claim_ms_1k`` / ``claim_ms_100k``: one claim + consume, sequential, beside a backlog of 1k / 100k;
- ``wake_ms``: post on one board -> ``wait()`` returns on another, median of 20.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from benchmarks.common import print_json_of
from jobboard import JobBoard, NewJob, open_board
from jobboard_postgresql import PostgresBackend


def fresh(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}board=bench-{uuid.uuid4().hex[:8]}"


async def board_cycle(url: str, jobs: int, workers: int) -> dict[str, float]:
    """post_many ``jobs`` (timed), then ``workers`` claimers consume them all (timed)."""
    async with open_board(fresh(url)) as board:
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            await board.post_many([NewJob("cycle", {"n": n}) for n in range(start, min(jobs, start + 1000))])
        post_many = jobs / (time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.gather(*(claimer(board) for _ in range(workers)))
        return {"post_many_per_s": post_many, "cycles_per_s": jobs / (time.perf_counter() - started)}


async def claimer(board: JobBoard) -> None:
    claim = await board.claim_next("bench")
    while claim is not None:
        claim = await board.consume_and_claim_next(claim, None)


async def posts(url: str, count: int, workers: int) -> float:
    async with open_board(fresh(url)) as board:
        left = iter(range(count))

        async def poster() -> None:
            for n in left:
                await board.post("p", {"n": n})

        started = time.perf_counter()
        await asyncio.gather(*(poster() for _ in range(workers)))
        return count / (time.perf_counter() - started)


async def claim_cost(url: str, backlog: int, samples: int = 300) -> float:
    """Milliseconds per claim_next + consume with ``backlog`` other jobs on the board (median of samples)."""
    async with open_board(fresh(url)) as board:
        for start in range(0, backlog, 5000):
            await board.post_many([NewJob("old") for _ in range(start, min(backlog, start + 5000))])
        await board.post_many([NewJob("hot", priority="high") for _ in range(samples)])
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            claim = await board.claim_next("bench", names=["hot"])
            assert claim is not None
            await board.consume(claim)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000


async def wake(url: str, samples: int = 20) -> float:
    board_url = fresh(url)
    async with open_board(board_url) as poster, open_board(board_url) as waiter:
        latencies = []
        for _ in range(samples):
            task = asyncio.ensure_future(waiter.wait())
            await asyncio.sleep(0.05)
            started = time.perf_counter()
            await poster.post("w")
            await task
            latencies.append(time.perf_counter() - started)
            claim = await waiter.claim_next("w")
            assert claim is not None
            await waiter.consume(claim)
        return statistics.median(latencies) * 1000


async def drivers(url: str, jobs: int, workers: int) -> dict[str, float]:
    """The board's claim and consume functions called through each driver (raw: no board around them)."""
    import psycopg

    board_url = fresh(url)
    async with open_board(board_url) as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend)
        s, name, ns, session = f'"{backend.options.schema}"', backend.options.board, backend.options.ns, \
            backend.writer.session_id
        claim_sql = f"SELECT r_id, r_gen FROM {s}.claim_next($1, $2, $3, 'w', NULL, $4::uuid, false)"
        consume_sql = f"SELECT r_status FROM {s}.consume($1, $2, $3, $4, $5, 'w', '\\xc0'::bytea, false)"
        results: dict[str, float] = {}

        async def asyncpg_cycles() -> None:
            pool = await asyncpg.create_pool(backend.options.dsn, min_size=workers, max_size=workers)

            async def one() -> None:
                async with pool.acquire() as connection:
                    while (row := await connection.fetchrow(claim_sql, name, ns, session, str(uuid.uuid4()))):
                        await connection.fetchrow(consume_sql, name, ns, session, row["r_id"], row["r_gen"])

            await asyncio.gather(*(one() for _ in range(workers)))
            await pool.close()

        async def psycopg_cycles() -> None:
            connections = [await psycopg.AsyncConnection.connect(backend.options.dsn, autocommit=True)
                           for _ in range(workers)]
            claim_p, consume_p = claim_sql.replace("$4", "%s"), consume_sql
            for n in range(5, 0, -1):
                consume_p = consume_p.replace(f"${n}", "%s")
            claim_p = claim_p.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s")

            async def one(connection: Any) -> None:
                while (row := await (await connection.execute(claim_p, (name, ns, session, str(uuid.uuid4()))))
                       .fetchone()):
                    await connection.execute(consume_p, (name, ns, session, row[0], row[1]))

            await asyncio.gather(*(one(c) for c in connections))
            for connection in connections:
                await connection.close()

        for label, run in (("asyncpg", asyncpg_cycles), ("psycopg3", psycopg_cycles)):
            await board.post_many([NewJob("d") for _ in range(jobs)])
            started = time.perf_counter()
            await run()
            results[label] = jobs / (time.perf_counter() - started)
        return results


async def repeated(count: int, make: Callable[[], Awaitable[Any]]) -> list[Any]:
    return [await make() for _ in range(count)]


def median_by_key(items: list[dict[str, float]]) -> dict[str, Any]:
    return {key: {"median": round(statistics.median(i[key] for i in items), 2),
                  "runs": [round(i[key], 2) for i in items]} for key in items[0]}


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "runs": [round(v, 3) for v in values]}


async def main(url: str, runs: int, jobs: int, workers: int, backlog: int) -> dict[str, Any]:
    return {
        "drivers_cycles_per_s": median_by_key(await repeated(runs, lambda: drivers(url, jobs, workers))),
        "board": median_by_key(await repeated(runs, lambda: board_cycle(url, jobs, workers))),
        "posts_per_s": summary(await repeated(runs, lambda: posts(url, jobs, workers))),
        "claim_ms_1k": summary(await repeated(runs, lambda: claim_cost(url, 1000))),
        f"claim_ms_{backlog // 1000}k": summary(await repeated(runs, lambda: claim_cost(url, backlog))),
        "wake_ms": summary(await repeated(runs, lambda: wake(url))),
        "workers": workers, "jobs": jobs,
    }


if __name__ == "__main__":
    print_json_of("postgresql_cycle", main, runs=3, jobs=3000, workers=16, backlog=100_000)
