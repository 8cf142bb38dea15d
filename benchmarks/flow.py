"""Flow control's cost when it does not bind (issue 27): claim cycles with limits configured, against none.

    python -m benchmarks.flow [--url memory://] [--jobs 3000] [--rounds 7] [--rate 10000/0.05s] [--server-port PORT]

Each round runs every variant once, interleaved (the order rotates), each on a fresh board: ``--jobs``
jobs of one group are posted (``post_many``, not timed), then one claimer claims and consumes them
one by one (``claim_next`` + ``consume``, timed). The variants:

- ``none``: the jobs carry the group, no limit is set;
- ``limit``: the group has ``concurrency=1000`` (one claimer holds at most one job: never binding) and
  another job name is paused (so the claim paths consult flow control);
- ``limit+rate``: the same plus ``rate`` (``--rate``, far above the cycle rate: never binding).

Prints one JSON line per variant (cycles per second by the wall clock, by this process's CPU time and, with
``--server-port``, by the CPU time of this process and the server listening on that port together: median,
min, max over the rounds; the ratio of medians to ``none``; each round's ratio) and one with the load
average before and after. ``--url`` takes any backend's URL: ``{id}`` in it is replaced by a fresh id per
board, else the id is appended (``sqlite:///tmp/flow.db?board=``, ``zookeeper://HOSTS/flow-``,
``redis://HOST:PORT/0/flow-``, ``postgresql://USER@HOST:PORT/postgres?board=flow{id}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path

from benchmarks.common import CLOCK_TICKS
from jobboard import NewJob, open_board
from jobboard.board.limits import parse_rate

GROUP = "tenant"
VARIANTS = ("none", "limit", "limit+rate")


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` on this host (from /proc), or ``None``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                return int(fd_dir.parent.name)
        except OSError:  # gone, or not ours
            continue
    return None


def server_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of the server ``pid``, its live children and its children reaped (PostgreSQL's backends are
    children of the postmaster; Redis and ZooKeeper work in the one process), from /proc."""
    if not pid:
        return 0.0
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        if stat.parent.name == str(pid):
            ticks += sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
        elif fields[1] == str(pid):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def board_url(url: str) -> str:
    board = uuid.uuid4().hex[:12]
    return url.replace("{id}", board) if "{id}" in url else f"{url}{board}"


async def one_run(url: str, variant: str, jobs: int, rate: str, server: int | None) -> tuple[float, float, float]:
    """Claim cycles per second of one variant on a fresh board: by the wall clock, by this process's CPU time
    (less moved by the other processes of a shared machine; on memory:// and sqlite:// all the work is here),
    and by this process's and the ``server`` process's CPU time together (0 without a server)."""
    async with open_board(board_url(url)) as board:
        if variant != "none":
            await board.set_limit(GROUP, concurrency=1000, rate=parse_rate(rate) if variant == "limit+rate" else None)
            await board.pause("some-other-name")
        for start in range(0, jobs, 500):
            await board.post_many([NewJob("work", group=GROUP) for _ in range(start, min(jobs, start + 500))])
        began, cpu, served = time.perf_counter(), time.process_time(), server_cpu_seconds(server)
        done = 0
        while (claim := await board.claim_next("bench")) is not None:
            await board.consume(claim)
            done += 1
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        served = server_cpu_seconds(server) - served
        assert done == jobs, (variant, done)
        return jobs / elapsed, jobs / cpu, jobs / (cpu + served) if server else 0.0


async def main(url: str, jobs: int, rounds: int, rate: str, server_port: int | None) -> None:
    load_before = os.getloadavg()
    server = None if server_port is None else listening_pid(server_port)
    if server_port is not None and server is None:
        raise SystemExit(f"no process of this host listens on port {server_port}")
    results: dict[str, list[tuple[float, float, float]]] = {variant: [] for variant in VARIANTS}
    for round_number in range(rounds):
        order = VARIANTS[round_number % 3:] + VARIANTS[:round_number % 3]
        for variant in order:
            results[variant].append(await one_run(url, variant, jobs, rate, server))
    clocks = (("wall", 0), ("cpu", 1), *((("cpu_with_server", 2),) if server else ()))
    for variant, runs in results.items():
        record: dict[str, object] = {"url": url, "variant": variant, "jobs": jobs, "rounds": rounds}
        for clock, index in clocks:
            rates = [run[index] for run in runs]
            base = [run[index] for run in results["none"]]
            median = statistics.median(rates)
            record[f"{clock}_cycles_per_s"] = {"median": round(median), "min": round(min(rates)),
                                               "max": round(max(rates))}
            record[f"{clock}_ratio_to_none"] = round(median / statistics.median(base), 3)
            record[f"{clock}_per_round_ratio"] = [round(r / n, 3) for r, n in zip(rates, base, strict=True)]
        print(json.dumps(record))
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="memory://flow-bench-")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate", default="10000/0.05s", help="the rate of limit+rate (never binding)")
    parser.add_argument("--server-port", type=int, help="count the CPU time of the server listening on this port too")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.url, arguments.jobs, arguments.rounds, arguments.rate, arguments.server_port))
