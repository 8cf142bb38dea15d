"""Server CPU per cycle on each shard of a Redis Cluster for a board spread over it, against one server.

    python -m benchmarks.redis_spread --jobs 3000 --workers 18 --rounds 5

Starts one redis-server with a replica and a Redis Cluster of 3 masters + 3 replicas
(``tests/support/rediscluster.py``), every server with ``--appendfsync`` (``always`` by default), and runs, in turn each round (the order
rotating), the same load on four boards: ``one-server`` (the lone server), ``one-slot`` (``?cluster=1``: the
whole board in one slot), ``spread`` (``?cluster=1&partitions=3``) and ``spread-exact`` (the same with
``order=exact``). A run: N jobs posted 18 in flight (``--in-flight``), then W (18) claimers ``claim_next`` then
``consume_and_claim_next`` until the board is empty, posters and claimers spread over B open boards of the
board (``--boards``, 3: a fleet's processes, here in one process, each with its home partition). Per run and per master: its
CPU (``INFO cpu``, user + sys) over the run, in ms per cycle (post + claim + consume); for the cluster boards
the busiest master's figure and every master's. Prints a JSON line (``bench: redis_spread``) and a table of
medians and ranges; ``ratio``: the busiest master's CPU per cycle ÷ one server's, each run against the
one-server run of its round; ``idle_ms_per_cycle``: what the busiest server spends with no client (its cron,
a cluster node's bus: ``idle_ms_per_s``, measured before the rounds) over the run, per cycle. Also per master and per cycle: the commands it ran (the work) and the read
events it processed (each one an event-loop wake-up, a ``read``, a reply ``write``; with
``appendfsync always``, an AOF write and fsync; and the replication stream's write, whatever the number of
commands it brought).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from contextlib import AsyncExitStack, ExitStack
from typing import Any

from benchmarks.redis_fleet import server_info
from jobboard import JobBoard, open_board

SYSTEMS = ("one-server", "one-slot", "spread", "spread-exact")



def fresh_root(chars: int) -> str:
    """A new board root of ``chars`` characters (8 by default, as ``jobboard``). Its length is the hash tag's
    in every key, which a cluster node hashes (CRC16) for each key of each command: 45 characters (before
    2026-11-28) cost the cluster boards more than a user's root does."""
    return ("b" + uuid.uuid4().hex * 2)[:chars]


def root_chars(text: str) -> int:
    """``--root-chars``: 1 to 64."""
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 64, not {text!r}")
    return int(text)


def systems(text: str) -> tuple[str, ...]:
    """``--systems``: some of :data:`SYSTEMS`, in their order, ``one-server`` always among them."""
    asked = {name.strip() for name in text.split(",") if name.strip()}
    if unknown := asked - set(SYSTEMS):
        raise argparse.ArgumentTypeError(f"unknown board {min(unknown)!r}: one of {', '.join(SYSTEMS)}")
    return tuple(name for name in SYSTEMS if name in asked or name == "one-server")


def counters(hosts: list[str]) -> list[tuple[float, float, float, float]]:
    """Each server's CPU seconds so far (user + sys), commands run (``INFO commandstats``: a script call and
    each command it runs) and read events processed (``total_reads_processed``: one per socket read, which
    may bring several commands), and of its CPU seconds the kernel's (sys)."""
    found = []
    for host in hosts:
        cpu = server_info(f"redis://{host}/0", "cpu")
        stats = [dict(part.split("=", 1) for part in value.split(","))
                 for value in server_info(f"redis://{host}/0", "commandstats").values()]
        reads = float(server_info(f"redis://{host}/0", "stats")["total_reads_processed"])
        found.append((float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
                      sum(float(stat["calls"]) for stat in stats), reads, float(cpu["used_cpu_sys"])))
    return found


def idle_cpu(hosts: list[str], seconds: float = 5.0) -> list[float]:
    """Each server's CPU while no client works, in ms per second (its cron; a cluster node's bus too)."""
    before, started = counters(hosts), time.perf_counter()
    time.sleep(seconds)
    after, elapsed = counters(hosts), time.perf_counter() - started
    return [round(1000 * (now[0] - was[0]) / elapsed, 3) for was, now in zip(before, after, strict=True)]


async def load(url: str, jobs: int, workers: int, boards: int, in_flight: int) -> float:
    """Post ``jobs`` (``in_flight`` at a time), then run them with ``workers`` claimers, both spread over ``boards`` boards
    of the board ``url`` (a fleet's processes, in one process); the seconds the run took."""
    async with AsyncExitStack() as stack:
        fleet = [await stack.enter_async_context(open_board(url)) for _ in range(boards)]
        started = time.perf_counter()
        queue = iter(range(jobs))

        async def poster(board: JobBoard) -> None:
            for index in queue:
                await board.post("work", {"i": index})

        await asyncio.gather(*(poster(fleet[n % boards]) for n in range(in_flight)))

        async def claimer(board: JobBoard, name: str) -> None:
            claim = await board.claim_next(name)
            while claim is not None:
                claim = await board.consume_and_claim_next(claim, None)

        await asyncio.gather(*(claimer(fleet[n % boards], f"w{n}") for n in range(workers)))
        for _ in range(100):  # a claimer that found nothing left while another's stolen claim was running
            if await fleet[0].job_count() == 0:
                break
            await asyncio.gather(*(claimer(board, "late") for board in fleet))
        assert await fleet[0].job_count() == 0
        return time.perf_counter() - started


def one_run(system: str, urls: dict[str, str], hosts: dict[str, list[str]], args: argparse.Namespace) -> dict[str, Any]:
    servers, jobs = hosts[system], args.jobs
    before = counters(servers)
    url = urls[system].format(root=fresh_root(args.root_chars))
    seconds = asyncio.run(load(url, jobs, args.workers, args.boards, args.in_flight))
    after = counters(servers)
    deltas = [[(end - start) / jobs for start, end in zip(was, now, strict=True)]
              for was, now in zip(before, after, strict=True)]
    per_cycle = [round(cpu * 1000, 4) for cpu, _, _, _ in deltas]
    return {"system": system, "ms_per_cycle": per_cycle, "busiest": max(per_cycle),
            "sys_ms_per_cycle": [round(kernel * 1000, 4) for _, _, _, kernel in deltas],
            "commands_per_cycle": [round(calls, 2) for _, calls, _, _ in deltas],
            "reads_per_cycle": [round(reads, 2) for _, _, reads, _ in deltas],
            "commands_max": round(max(calls for _, calls, _, _ in deltas), 2),
            "reads_max": round(max(reads for _, _, reads, _ in deltas), 2),
            "cycles_per_s": round(jobs / seconds, 1), "seconds": round(seconds, 3), "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=18, help="claimers (a multiple of --boards: an even spread)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--boards", type=int, default=3, help="boards (a fleet's processes) sharing the load")
    parser.add_argument("--in-flight", type=int, default=18, help="posts in flight (a multiple of --boards)")
    parser.add_argument("--appendfsync", default="always", choices=("always", "everysec", "no"),
                        help="every server's AOF fsync policy (always: an fsync per event-loop iteration that wrote)")
    parser.add_argument("--linger", type=float, default=0.0, help="every board URL's ?linger= (seconds)")
    parser.add_argument("--root-chars", type=root_chars, default=8, help="the length of each run's board root (1 to 64)")
    parser.add_argument("--systems", type=systems, default=SYSTEMS,
                        help=f"the boards to run, comma-separated (one-server always runs: the ratios' base); {','.join(SYSTEMS)}")
    args = parser.parse_args(argv)
    if args.workers % args.boards or args.in_flight % args.boards:
        parser.error("--workers and --in-flight must be multiples of --boards: each board works on its home "
                     "partition, so 16 over 3 boards puts 6/16 of the cycles on one master (0.37, not 0.33)")
    from tests.support.rediscluster import RedisCluster
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    ensure_redis_installed()
    with ExitStack() as stack:
        lone = stack.enter_context(RedisServer(appendfsync=args.appendfsync))
        stack.enter_context(RedisServer(appendfsync=args.appendfsync,
                                        extra=["--replicaof", "127.0.0.1", str(lone.port)]))
        cluster = stack.enter_context(RedisCluster(appendfsync=args.appendfsync))
        masters = [node.hosts for node in cluster.nodes if node.role() == "master"]
        lingering = {"linger": f"{args.linger:g}"} if args.linger else {}
        urls = {"one-server": lone.url("/0/{root}") + (f"?linger={args.linger:g}" if args.linger else ""),
                "one-slot": cluster.url("{root}", **lingering),
                "spread": cluster.url("{root}", partitions=3, **lingering),
                "spread-exact": cluster.url("{root}", partitions=3, order="exact", **lingering)}
        hosts = {"one-server": [lone.hosts], "one-slot": masters, "spread": masters, "spread-exact": masters}
        idle = {"one-server": idle_cpu(hosts["one-server"]), "cluster masters": idle_cpu(masters)}
        print(json.dumps({"idle_ms_per_s": idle}), flush=True)
        runs = []
        for round_ in range(args.rounds):
            order = args.systems[round_ % len(args.systems):] + args.systems[:round_ % len(args.systems)]
            for system in order:
                run = one_run(system, urls, hosts, args)
                run["round"] = round_
                idle_rate = max(idle["one-server" if system == "one-server" else "cluster masters"])
                run["idle_ms_per_cycle"] = round(idle_rate * run["seconds"] / args.jobs, 4)
                runs.append(run)
                print(json.dumps(run), flush=True)
            base = next(run["busiest"] for run in runs if run["round"] == round_ and run["system"] == "one-server")
            for run in runs:
                if run["round"] == round_:
                    run["ratio"] = round(run["busiest"] / base, 3)
    summary = {}
    for system in args.systems:
        mine = [run for run in runs if run["system"] == system]
        summary[system] = {key: (statistics.median(run[key] for run in mine), min(run[key] for run in mine),
                                 max(run[key] for run in mine))
                           for key in ("busiest", "ratio", "commands_max", "reads_max", "cycles_per_s")}
    print(json.dumps({"bench": "redis_spread", "jobs": args.jobs, "workers": args.workers, "boards": args.boards, "linger": args.linger,
                      "root_chars": args.root_chars,
                      "appendfsync": args.appendfsync, "idle_ms_per_s": idle,
                      "in_flight": args.in_flight,
                      "runs": runs,
                      "summary": summary}))
    print("| board | busiest master, ms CPU per cycle | ÷ one server | commands per cycle, most on a master "
          "| read events per cycle, most on a master | cycles/s |")
    print("|---|---|---|---|---|---|")
    for system, found in summary.items():
        print(f"| {system} | " + " | ".join(f"{median:g} ({low:g}-{high:g})" for median, low, high in found.values())
              + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
