"""Server instructions per cycle on each master of a Redis Cluster for a spread board, against one server.

    python -m benchmarks.redis_spread_instructions --jobs 3000 --rounds 2

``benchmarks.redis_spread`` measures each server's CPU. On this 2-core machine, where the client and eight
servers share the cores, a master doing a third of the work runs it at fewer instructions per nanosecond
than one server doing all of it (its caches are cold when it wakes), so its CPU ratio says how this
machine runs three lightly loaded servers beside their client as much as what the board asks of them.
This counts what the board asks: the instructions each server runs, under ``valgrind --tool=callgrind``
(the lone server and the cluster's three masters; replicas run natively), zeroed before a run and dumped
after it (``callgrind_control``), so the machine's load cannot move them.

The same load as ``benchmarks.redis_spread`` (its ``load``: N jobs posted 36 in flight by 3 boards, then 36
claimers ``claim_next`` and ``consume_and_claim_next`` until the board is empty) on ``one-server``,
``one-slot`` (``?cluster=1``) and ``spread`` (``&partitions=3``), every URL with ``?linger=`` (0.01 by
default), the order rotating by round. Per run and server: instructions per cycle, in all
(``instructions``) and less what the server runs idle for as long as the run took (``net``: its cron and a
cluster node's bus, counted first with no client: time-based work, which valgrind's slowness inflates).
``ratio``: the busiest master's ÷ the one server's of the same round, in all and net. Prints a JSON line
per run, then one with the medians (``bench: redis_spread_instructions``). ``--phases``: the jobs posted,
then claimed, then consumed, one phase after another: per phase, the net instructions per op summed over the
board's servers (where a board's ops cost more than another's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

from benchmarks.redis_fleet import server_info
from benchmarks.redis_spread import fresh_root, load, root_chars
from jobboard import Claim, JobBoard, open_board

SYSTEMS = ("one-server", "one-slot", "spread")


class Counted:
    """One server under callgrind: zero its counts, dump them, read the dump's total."""

    def __init__(self, hosts: str, dumps: Path) -> None:
        self.hosts = hosts
        self.pid = int(server_info(f"redis://{hosts}/0", "server")["process_id"])
        self.dumps = dumps

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.pid)], check=True, capture_output=True, timeout=300)

    def zero(self) -> None:
        self._control("-z")

    def dump(self) -> int:
        """The instructions run since the last :meth:`zero`."""
        self._control("-d")
        newest = max(self.dumps.glob(f"callgrind.{self.pid}.*"), key=lambda path: path.stat().st_mtime_ns)
        found = re.search(r"^(?:summary|totals): (\d+)", newest.read_text(), re.MULTILINE)
        assert found, f"no total in {newest}"
        return int(found.group(1))


class Window:
    """Counts ``servers``' instructions from :meth:`open` to :meth:`close`, and the same less what each runs idle
    (``idle``: instructions per second) for as long."""

    def __init__(self, servers: list[Counted], idle: list[float] | None = None) -> None:
        self.servers, self.idle, self.started = servers, idle or [0.0] * len(servers), 0.0

    def open(self) -> None:
        for server in self.servers:
            server.zero()
        self.started = time.perf_counter()

    def close(self, seconds: float | None = None) -> tuple[list[int], list[float], float]:
        """Each server's instructions since :meth:`open`, net of ``seconds`` idle (default: the window's), and
        the window's seconds."""
        counts = [server.dump() for server in self.servers]
        elapsed = time.perf_counter() - self.started
        idle_for = elapsed if seconds is None else seconds
        return counts, [count - rate * idle_for for count, rate in zip(counts, self.idle, strict=True)], elapsed


def idle_rates(servers: list[Counted], seconds: float = 10.0) -> list[float]:
    """Each server's instructions per second with no client (its cron; a cluster node's bus too)."""
    window = Window(servers)
    window.open()
    time.sleep(seconds)
    counts, _, elapsed = window.close()
    return [count / elapsed for count in counts]


def one_run(system: str, url: str, servers: list[Counted], idle: list[float], args: argparse.Namespace) -> dict[str, Any]:
    window = Window(servers, idle)
    window.open()
    seconds = asyncio.run(load(url.format(root=fresh_root(args.root_chars)), args.jobs, args.workers,
                               args.boards, args.in_flight))
    counts, nets, _ = window.close(seconds)
    per_cycle = [round(count / args.jobs) for count in counts]
    net = [round(count / args.jobs) for count in nets]
    return {"system": system, "instructions": per_cycle, "net": net, "busiest": max(per_cycle),
            "busiest_net": max(net), "seconds": round(seconds, 1)}


def per_op(window: Window, ops: int) -> int:
    """The servers' net instructions per op since ``window`` opened, summed."""
    return round(sum(window.close()[1]) / ops)


async def phase_load(url: str, window: Window, args: argparse.Namespace) -> dict[str, int]:
    """N posts, N ``claim_next`` and N ``consume`` one phase after another (``--in-flight`` and ``--workers``
    at a time, over ``--boards`` boards): each phase's net instructions per op on all the servers."""
    jobs, found = args.jobs, {}
    claims: list[tuple[JobBoard, Claim]] = []
    async with AsyncExitStack() as stack:
        fleet = [await stack.enter_async_context(open_board(url)) for _ in range(args.boards)]
        queue = iter(range(jobs))

        async def poster(board: JobBoard) -> None:
            for index in queue:
                await board.post("work", {"i": index})

        async def claimer(board: JobBoard) -> None:
            while len(claims) < jobs and (claim := await board.claim_next("w")) is not None:
                claims.append((board, claim))

        async def consumer(held: Iterator[tuple[JobBoard, Claim]]) -> None:
            for board, claim in held:
                await board.consume(claim, None)

        window.open()
        await asyncio.gather(*(poster(fleet[n % args.boards]) for n in range(args.in_flight)))
        found["post"] = per_op(window, jobs)
        window.open()
        await asyncio.gather(*(claimer(fleet[n % args.boards]) for n in range(args.workers)))
        found["claim_next"] = per_op(window, len(claims))
        window.open()
        held = iter(claims)
        await asyncio.gather(*(consumer(held) for _ in range(args.workers)))
        found["consume"] = per_op(window, len(claims))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=36)
    parser.add_argument("--boards", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--phases", action="store_true",
                        help="posts, claims and consumes one phase after another: each phase's net instructions "
                             "per op on all the servers (the board's or the masters') instead of cycles")
    parser.add_argument("--linger", type=float, default=0.01)
    parser.add_argument("--appendfsync", default="everysec", choices=("always", "everysec", "no"))
    parser.add_argument("--root-chars", type=root_chars, default=8, help="the length of each run's board root (1 to 64)")
    args = parser.parse_args(argv)
    from tests.support.rediscluster import RedisCluster
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    ensure_redis_installed()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install -y valgrind)")
    with ExitStack() as stack:
        dumps = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobboard-callgrind-")))
        under = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/callgrind.%p", "--dump-line=no"]
        lone = stack.enter_context(RedisServer(appendfsync=args.appendfsync, run_under=under, start_timeout=120.0))
        stack.enter_context(RedisServer(appendfsync=args.appendfsync,
                                        extra=["--replicaof", "127.0.0.1", str(lone.port)]))
        cluster = stack.enter_context(RedisCluster(appendfsync=args.appendfsync, masters_under=under))
        masters = [node for node in cluster.nodes if node.role() == "master"]
        if sorted(node.port for node in masters) != sorted(node.port for node in cluster.nodes[:3]):
            raise SystemExit("the cluster's masters are not the three nodes run under callgrind")
        linger = f"{args.linger:g}"
        urls = {"one-server": lone.url("/0/{root}") + f"?linger={linger}",
                "one-slot": cluster.url("{root}", linger=linger),
                "spread": cluster.url("{root}", partitions=3, linger=linger)}
        counted = {"one-server": [Counted(lone.hosts, dumps)],
                   "masters": [Counted(node.hosts, dumps) for node in masters]}
        idle = {key: idle_rates(servers) for key, servers in counted.items()}
        print(json.dumps({"idle_instructions_per_s": {key: [round(rate) for rate in rates]
                                                      for key, rates in idle.items()}}), flush=True)
        runs = []
        for round_ in range(args.rounds):
            for system in SYSTEMS[round_ % 3:] + SYSTEMS[:round_ % 3]:
                key = "one-server" if system == "one-server" else "masters"
                if args.phases:
                    url = urls[system].format(root=fresh_root(args.root_chars))
                    found = asyncio.run(phase_load(url, Window(counted[key], idle[key]), args))
                    print(json.dumps({"round": round_, "system": system, "net_per_op": found}), flush=True)
                    continue
                run = {"round": round_, **one_run(system, urls[system], counted[key], idle[key], args)}
                runs.append(run)
                print(json.dumps(run), flush=True)
            if args.phases:
                continue
            base = next(run for run in runs if run["round"] == round_ and run["system"] == "one-server")
            for run in runs:
                if run["round"] == round_:
                    run["ratio"] = round(run["busiest"] / base["busiest"], 3)
                    run["ratio_net"] = round(run["busiest_net"] / base["busiest_net"], 3)
    if args.phases:
        return 0
    summary = {system: {key: statistics.median(run[key] for run in runs if run["system"] == system)
                        for key in ("busiest", "busiest_net", "ratio", "ratio_net")}
               for system in SYSTEMS}
    print(json.dumps({"bench": "redis_spread_instructions", "jobs": args.jobs, "workers": args.workers,
                      "in_flight": args.in_flight, "linger": args.linger, "appendfsync": args.appendfsync,
                      "root_chars": args.root_chars,
                      "runs": runs, "summary": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
