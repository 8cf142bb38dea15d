"""Where a postgresql:// full cycle's time goes: client CPU, server CPU and round trips per cycle.

    python -m benchmarks.postgresql_costs --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 3000 --runs 3

Each run posts ``--jobs`` jobs (``post_many``), then W claimers run ``claim_next`` once and
``consume_and_claim_next`` until the board is empty (the worker's fused loop). Measured over the
claiming part only: wall time, this process's CPU time, the CPU time of every process of the server
(the postmaster's children, from /proc: the server must run on this machine) and the board's calls to
the server (``Database.run``, one round trip each unless retried). Prints one JSON object, per W:
medians (and runs) of cycles/s, client and server CPU µs per cycle and round trips per cycle.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import print_json_of
from benchmarks.postgresql_cycle import claimer, fresh
from jobboard import NewJob, open_board
from jobboard_postgresql import PostgresBackend
from jobboard_postgresql.database import Database

TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int) -> float:
    """Seconds of CPU used by the postmaster's live children (user + system)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:  # field 4, ppid (after the command)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def one(url: str, jobs: int, workers: int) -> dict[str, float]:
    calls = [0]
    run = Database.run

    async def counted(self: Database, what: str, call: Any) -> Any:
        calls[0] += 1
        return await run(self, what, call)

    async with open_board(fresh(url)) as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        async with backend.db.pool.acquire() as connection:
            postmaster = parent_of(await connection.fetchval("SELECT pg_backend_pid()"))
        for start in range(0, jobs, 1000):
            await board.post_many([NewJob("cycle", {"n": n}) for n in range(start, min(jobs, start + 1000))])
        Database.run = counted  # type: ignore[method-assign]
        try:
            server, client, started = server_cpu(postmaster), time.process_time(), time.perf_counter()
            await asyncio.gather(*(claimer(board) for _ in range(workers)))
            wall = time.perf_counter() - started
            client, server = time.process_time() - client, server_cpu(postmaster) - server
        finally:
            Database.run = run  # type: ignore[method-assign]
    return {"cycles_per_s": jobs / wall, "client_us_per_cycle": client / jobs * 1e6,
            "server_us_per_cycle": server / jobs * 1e6, "round_trips_per_cycle": calls[0] / jobs}


async def main(url: str, jobs: int, workers: str, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {"jobs": jobs}
    figures: dict[int, list[dict[str, float]]] = {int(w): [] for w in workers.split(",")}
    for _ in range(runs):
        for w, items in figures.items():
            items.append(await one(url, jobs, w))
    for w, items in figures.items():
        results[f"w{w}"] = {key: {"median": round(statistics.median(i[key] for i in items), 2),
                                  "runs": [round(i[key], 2) for i in items]} for key in items[0]}
    return results


if __name__ == "__main__":
    print_json_of("postgresql_costs", main, jobs=3000, workers="1,16,64", runs=3)
