"""Bulk posts, postgresql:// beside pgqueuer, by wall time and by CPU per job (client and server).

    python -m benchmarks.postgresql_peers_bulk --url postgresql://postgres@127.0.0.1:PORT/postgres --rounds 8

Each round runs, in alternating order, one child process per system that posts ``--jobs`` jobs in batches
of 1,000 right after opening (as ``benchmarks.postgresql_peers`` does before each cycle: jobboard
``post_many`` of ``NewJob("cycle", {"n": n})`` on a fresh board, pgqueuer ``Queries.enqueue`` with lists
on a fresh connection, its table truncated), then ``--jobs`` more (warm). Per part: jobs/s, the child's CPU
per job and the server's (user + system of the postmaster's children alive at both ends, from /proc:
run it on a server nobody else uses), and the child's garbage collections (``gc_young``, ``gc_full``: counts;
``gc_us``: their CPU µs per job). CPU per job is what a busy machine changes least: on 2 cores shared
by client and server, wall time is about their sum plus the round trips.

Prints one JSON object (per system and part, each figure's median and range over the rounds) and, on stderr,
one line per system and part and jobboard's jobs/s over pgqueuer's.

``--payload`` says what each job carries, the same for both: ``details`` (the default: jobboard's
``{"n": n}``, pgqueuer's payload the JSON bytes of the same map, encoded by the caller as its docs show) or
``none`` (no details, a ``None`` payload). Before 2026-11-27 15:00 pgqueuer was given ``None`` payloads while
jobboard encoded details: a comparison of unequal work.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.postgresql_costs import parent_of
from benchmarks.postgresql_peer_queues import BATCH, _pgqueuer_ready
from benchmarks.postgresql_post_many import TICKS, children_ticks

Post = Callable[[int, int], Awaitable[Any]]


class Collections:
    """The garbage collector's runs while it is installed (``gc.callbacks``): young (generations 0 and 1) and
    full ones, and the CPU seconds they took (this thread's)."""

    def __init__(self) -> None:
        self.young = self.full = 0
        self.seconds, self.started = 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.thread_time()
            return
        self.seconds += time.thread_time() - self.started
        if info["generation"] == 2:
            self.full += 1
        else:
            self.young += 1


async def timed(post: Post, jobs: int, postmaster: int) -> dict[str, float]:
    """``post(start, count)`` batch by batch: jobs/s, client and server CPU µs per job, and the client's garbage
    collections (young and full, and their CPU µs per job: a full one costs 6-8 ms and falls where the
    allocation counts put it, so one 4,000-job part may take it and the next not)."""
    collections = Collections()
    gc.callbacks.append(collections)
    try:
        server, client, started = children_ticks(postmaster), time.process_time(), time.perf_counter()
        for start in range(0, jobs, BATCH):
            await post(start, min(jobs, start + BATCH) - start)
        wall, client = time.perf_counter() - started, time.process_time() - client
    finally:
        gc.callbacks.remove(collections)
    after = children_ticks(postmaster)
    used = sum(after[pid] - server[pid] for pid in server.keys() & after.keys()) / TICKS
    return {"jobs_per_s": jobs / wall, "client_us": client / jobs * 1e6, "server_us": used / jobs * 1e6,
            "gc_young": collections.young, "gc_full": collections.full,
            "gc_us": collections.seconds / jobs * 1e6}


def details(n: int) -> dict[str, int] | None:
    return {"n": n} if PAYLOAD["details"] else None


PAYLOAD = {"details": True}


async def jobboard(url: str, jobs: int) -> dict[str, dict[str, float]]:
    from jobboard import NewJob, open_board
    from jobboard_postgresql import PostgresBackend

    async with open_board(f"{url}{'&' if '?' in url else '?'}board=bulk-{uuid.uuid4().hex[:8]}") as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        async with backend.db.pool.acquire() as connection:
            postmaster = parent_of(await connection.fetchval("SELECT pg_backend_pid()"))

        async def post(start: int, count: int) -> None:
            await board.post_many([NewJob("cycle", details(n)) for n in range(start, start + count)])

        return {"cold": await timed(post, jobs, postmaster), "warm": await timed(post, jobs, postmaster)}


async def pgqueuer(url: str, jobs: int) -> dict[str, dict[str, float]]:
    connection, queries = await _pgqueuer_ready(url)
    try:
        postmaster = parent_of(await connection.fetchval("SELECT pg_backend_pid()"))

        async def post(start: int, count: int) -> None:
            payloads = [None if (d := details(n)) is None else json.dumps(d).encode() for n in range(start, start + count)]
            await queries.enqueue(["cycle"] * count, payloads, [0] * count)

        return {"cold": await timed(post, jobs, postmaster), "warm": await timed(post, jobs, postmaster)}
    finally:
        await connection.close()


SYSTEMS = {"jobboard": jobboard, "pgqueuer": pgqueuer}


def rounds(url: str, jobs: int, count: int, payload: str) -> dict[str, Any]:
    """``count`` rounds of every system, each in its own child process, the order alternating."""
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in SYSTEMS}
    load = [os.getloadavg()[0]]
    for number in range(count):
        for name in (list(SYSTEMS) if number % 2 == 0 else list(reversed(SYSTEMS))):
            done = subprocess.run([sys.executable, "-m", "benchmarks.postgresql_peers_bulk", "--url", url, "--jobs",
                                   str(jobs), "--payload", payload, "--one", name], capture_output=True, text=True, timeout=300, check=True)
            runs[name].append(json.loads(done.stdout.splitlines()[-1]))
        load.append(os.getloadavg()[0])
    medians = {name: {part: {figure: {"median": round(statistics.median(run[part][figure] for run in done_runs), 2),
                                      "range": [round(min(run[part][figure] for run in done_runs), 2),
                                                round(max(run[part][figure] for run in done_runs), 2)]}
                             for figure in done_runs[0][part]} for part in done_runs[0]}
               for name, done_runs in runs.items()}
    return {"jobs": jobs, "rounds": count, "payload": payload, "load": [round(x, 1) for x in load], **medians}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgresql_peers_bulk")
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--payload", choices=("details", "none"), default="details")
    parser.add_argument("--one", choices=sorted(SYSTEMS), help="one system's figures, in this process")
    args = parser.parse_args()
    PAYLOAD["details"] = args.payload == "details"
    if args.one:
        print(json.dumps(asyncio.run(SYSTEMS[args.one](args.url, args.jobs))))
    else:
        report = rounds(args.url, args.jobs, args.rounds, args.payload)
        print(summary(report), file=sys.stderr)
        print(json.dumps(report))


def summary(report: dict[str, Any]) -> str:
    """One line per system and part: the medians (jobs/s, client and server CPU µs a job, GC µs a job and
    full collections), then jobboard's jobs/s over each peer's."""
    lines = [f"load {min(report['load'])}-{max(report['load'])}, {report['rounds']} rounds of {report['jobs']} jobs, "
             + f"payload {report['payload']}"]
    for name in SYSTEMS:
        for part, figures in report[name].items():
            lines.append(f"{name:9} {part:5} {figures['jobs_per_s']['median']:9,.0f} jobs/s  client "
                         f"{figures['client_us']['median']:5.2f} us (gc {figures['gc_us']['median']:4.2f}, full "
                         f"{figures['gc_full']['median']:.0f})  server {figures['server_us']['median']:5.2f} us")
    lines.extend(f"jobboard / {name}: " + ", ".join(
        f"{part} {report['jobboard'][part]['jobs_per_s']['median'] / report[name][part]['jobs_per_s']['median']:.2f}x"
        for part in report["jobboard"]) for name in SYSTEMS if name != "jobboard")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
