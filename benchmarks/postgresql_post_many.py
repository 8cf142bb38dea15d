"""``post_many`` on ``postgresql://``: jobs/s, this process's CPU and the server's CPU per job.

    python -m benchmarks.postgresql_post_many --url postgresql://... [--batches 1000,10000] [--jobs 40000]
    python -m benchmarks.postgresql_post_many --url ... --base REV [--rounds 7]

Plain postings (``NewJob("resize", {...})``: no key, no links), posted in batches on a fresh board.
Server CPU: the user + system time of the postmaster's children alive at both ends of the timed part
(from /proc: the server must run on this machine; children that start or end meanwhile, such as an
autovacuum worker, are left out). With ``--base REV``, each round runs one process from REV's tree and
one from this tree per batch size, in alternating order, each in its own ``schema=`` (the two trees'
schema versions may differ), and reports medians, ranges and the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.postgresql_costs import parent_of
from benchmarks.posting_front import ROOT, tree_env

TICKS = os.sysconf("SC_CLK_TCK")


def children_ticks(postmaster: int) -> dict[int, int]:
    """CPU ticks (user + system) of each live child of the postmaster."""
    ticks = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    return ticks


async def once(url: str, batch: int, jobs: int) -> dict[str, float]:
    from jobboard import NewJob, open_board
    from jobboard_postgresql import PostgresBackend
    work = [[NewJob("resize", {"url": "https://example.com/a.png", "n": n}) for n in range(start, start + batch)]
            for start in range(0, jobs, batch)]
    async with open_board(f"{url}{'&' if '?' in url else '?'}board=many-{uuid.uuid4().hex[:8]}") as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        async with backend.db.pool.acquire() as connection:
            pid = await connection.fetchval("SELECT pg_backend_pid()")
        postmaster = parent_of(pid)
        await board.post_many(work[0][:10])  # the connections open, the function compiled
        server, client, started = children_ticks(postmaster), time.process_time(), time.perf_counter()
        for each in work:
            await board.post_many(each)
        wall, client = time.perf_counter() - started, time.process_time() - client
        after = children_ticks(postmaster)
    used = sum(after[pid] - server[pid] for pid in server.keys() & after.keys()) / TICKS
    return {"jobs/s": round(jobs / wall), "client_us": round(client / jobs * 1e6, 2),
            "server_us": round(used / jobs * 1e6, 2)}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.before_after import base_tree
    runs: dict[str, list[dict[str, float]]] = {}
    with ExitStack() as stack:
        trees = {"base": stack.enter_context(base_tree(args.base)), "this": ROOT}
        for index in range(args.rounds):
            for batch in args.batches.split(","):
                for name in (["base", "this"] if index % 2 == 0 else ["this", "base"]):
                    url = f"{args.url}{'&' if '?' in args.url else '?'}schema=jobboard_{name}"
                    done = subprocess.run([sys.executable, "-m", "benchmarks.postgresql_post_many", "--once",
                                           "--url", url, "--batches", batch, "--jobs", str(args.jobs)],
                                          cwd=trees[name], env=tree_env(trees[name]), capture_output=True,
                                          text=True, check=True, timeout=900)
                    runs.setdefault(f"{batch} {name}", []).append(json.loads(done.stdout.splitlines()[-1]))
    return {key: {figure: {"median": statistics.median(run[figure] for run in values),
                           "range": [min(run[figure] for run in values), max(run[figure] for run in values)]}
                  for figure in values[0]} for key, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--batches", default="1000,10000")
    parser.add_argument("--jobs", type=int, default=40000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", help="a revision to compare with, alternating processes round by round")
    parser.add_argument("--once", action="store_true", help="one process's figures for one batch size")
    args = parser.parse_args()
    if args.once:
        print(json.dumps(asyncio.run(once(args.url, int(args.batches), args.jobs))))
        return
    load = list(os.getloadavg())
    figures = compare(args) if args.base else {
        batch: asyncio.run(once(args.url, int(batch), args.jobs)) for batch in args.batches.split(",")}
    print(json.dumps({"bench": "postgresql_post_many", "jobs": args.jobs, "rounds": args.rounds, "base": args.base,
                      "figures": figures, "load": [round(x, 2) for x in load + list(os.getloadavg())]}))


if __name__ == "__main__":
    main()
