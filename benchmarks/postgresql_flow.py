"""postgresql:// flow control's cost when it does not bind, with the server's CPU (``benchmarks.flow`` counts
only this process's, and on postgresql:// the claim's work is the server's).

    python -m benchmarks.postgresql_flow --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 2000 --rounds 7

The variants of ``benchmarks.flow`` (``none``: grouped jobs, no limit; ``limit``: ``concurrency=1000`` and
another name paused; ``limit+rate``: plus a rate far above the cycle rate), interleaved round by round
(the order rotates), each on a fresh board: ``--jobs`` jobs posted, then one claimer runs ``claim_next``
+ ``consume`` until the board is empty. Per variant: cycles/s by the wall clock, client and server CPU
µs per cycle (the server: every child of the postmaster, from /proc: the server must run on this
machine), medians and ranges, and the ratio of medians to ``none``; the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

from benchmarks.postgresql_costs import parent_of, server_cpu
from jobboard import NewJob, open_board
from jobboard.board.limits import parse_rate
from jobboard_postgresql import PostgresBackend

VARIANTS = ("none", "limit", "limit+rate")


async def one_run(url: str, variant: str, jobs: int, rate: str) -> dict[str, float]:
    joiner = "&" if "?" in url else "?"
    async with open_board(f"{url}{joiner}board=flow-{uuid.uuid4().hex}") as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        async with backend.db.pool.acquire() as connection:
            postmaster = parent_of(await connection.fetchval("SELECT pg_backend_pid()"))
        if variant != "none":
            await board.set_limit("tenant", concurrency=1000, rate=parse_rate(rate) if variant == "limit+rate" else None)
            await board.pause("some-other-name")
        for start in range(0, jobs, 500):
            await board.post_many([NewJob("work", group="tenant") for _ in range(start, min(jobs, start + 500))])
        server, client, began = server_cpu(postmaster), time.process_time(), time.perf_counter()
        done = 0
        while (claim := await board.claim_next("bench")) is not None:
            await board.consume(claim)
            done += 1
        wall = time.perf_counter() - began
        client, server = time.process_time() - client, server_cpu(postmaster) - server
        assert done == jobs, (variant, done)
        return {"cycles_per_s": jobs / wall, "client_us": client / jobs * 1e6, "server_us": server / jobs * 1e6}


async def main(url: str, jobs: int, rounds: int, rate: str) -> None:
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for number in range(rounds):
        for variant in VARIANTS[number % 3:] + VARIANTS[:number % 3]:
            runs[variant].append(await one_run(url, variant, jobs, rate))
    for variant, items in runs.items():
        record: dict[str, object] = {"variant": variant, "jobs": jobs, "rounds": rounds}
        for key in ("cycles_per_s", "client_us", "server_us"):
            values = [item[key] for item in items]
            base = statistics.median(item[key] for item in runs["none"])
            record[key] = {"median": round(statistics.median(values), 1), "min": round(min(values), 1),
                           "max": round(max(values), 1), "ratio_to_none": round(statistics.median(values) / base, 3)}
        print(json.dumps(record))
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate", default="10000/0.05s")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.url, arguments.jobs, arguments.rounds, arguments.rate))
