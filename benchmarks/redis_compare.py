"""redis:// against the Redis queues and its own raw ceiling: one server, one run, interleaved rounds.

    python -m benchmarks.redis_compare --redis redis://127.0.0.1:6379 --zk 127.0.0.1:2181 \\
        --peers-python /path/to/peers-venv/bin/python --taskflow-python /path/to/tf-venv/bin/python \
        --workers 1,4,16,64 --rounds 3

Each round runs, for each W, every system once, each in its own process (so a slow one cannot
disturb the next), in a fixed order; the report gives per system and W the median over rounds
of the consume rate (N jobs posted first, then W consumers until empty: ``benchmarks.cycle`` and
``benchmarks.peers.redis_queues``), the full post -> claim -> consume cycle of the board and of
the raw Lua ceiling through the backend's own client (``benchmarks.redis_clients``), and the
ratios asked for by the issue. SAQ and arq pin ``redis<6``: ``--peers-python`` is the Python of
a virtualenv with saq and arq; TaskFlow 6.5 needs redis>=7: ``--taskflow-python``, another one. Prints one JSON line per measurement to
stderr and the report to stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from typing import Any

JOBS = {"arq": 20, "taskflow": 50}
"""Fewer jobs (this many per consumer) for the slow systems: arq at its default poll starts at
most W jobs per 0.5 s; TaskFlow lists the board for every claim."""


def command(system: str, args: argparse.Namespace, workers: int) -> list[str]:
    jobs = str(min(args.jobs, JOBS[system] * workers if system in JOBS else args.jobs))
    board = f"{args.redis}/0/cmp-{uuid.uuid4().hex[:8]}"
    if system == "jobboard":
        return [sys.executable, "-m", "benchmarks.cycle", "--url", board, "--jobs", jobs,
                "--workers", str(workers), "--repeat", "1"]
    if system == "zookeeper":
        return [sys.executable, "-m", "benchmarks.cycle", "--url", f"zookeeper://{args.zk}/bench/cmp",
                "--jobs", jobs, "--workers", str(workers), "--repeat", "1"]
    if system in ("jobboard-full", "ceiling"):
        name = "jobboard" if system == "jobboard-full" else "wire"
        return [sys.executable, "-m", "benchmarks.redis_clients", "--url", args.redis, "--systems", name,
                "--workers", str(workers), "--rounds", "1", "--seconds", str(args.seconds)]
    python = args.taskflow_python if system == "taskflow" else args.peers_python
    return [python, "-m", "benchmarks.peers.redis_queues", "--system", system, "--url", args.redis,
            "--jobs", jobs, "--workers", str(workers), "--repeat", "1"]


def measure(system: str, args: argparse.Namespace, workers: int) -> dict[str, float]:
    done = subprocess.run(command(system, args, workers), capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        print(f"{system} W={workers} failed: {done.stderr[-2000:]}", file=sys.stderr)
        return {}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:  # one JSON line after other output
        report = json.loads(done.stdout.strip().splitlines()[-1])
    if "cycles_per_s" in report and isinstance(report["cycles_per_s"], dict):  # redis_clients
        return {"cycles_per_s": float(next(iter(report["median"].values())))}
    return {key: float(report["median"][key]) for key in ("cycles_per_s", "posts_per_s")}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", required=True, help="redis://host:port of the one server")
    parser.add_argument("--zk", default=None, help="ZooKeeper host:port for zookeeper:// (omitted if none)")
    parser.add_argument("--peers-python", default=None, help="Python of the SAQ/arq/TaskFlow virtualenv")
    parser.add_argument("--taskflow-python", default=None, help="Python of a virtualenv with taskflow (and redis>=7)")
    parser.add_argument("--workers", default="1,4,16,64")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    systems = ["ceiling", "jobboard-full", "jobboard"]
    if args.peers_python:
        systems += ["saq", "arq", "arq-10ms"]
    if args.taskflow_python:
        systems.append("taskflow")
    if args.zk:
        systems.append("zookeeper")
    widths = [int(value) for value in args.workers.split(",")]
    found: dict[str, dict[int, list[dict[str, float]]]] = {name: {w: [] for w in widths} for name in systems}
    for round_index in range(args.rounds):
        for workers in widths:
            for system in systems:
                result = measure(system, args, workers)
                print(json.dumps({"round": round_index, "system": system, "workers": workers, **result}),
                      file=sys.stderr, flush=True)
                if result:
                    found[system][workers].append(result)
    table: dict[str, Any] = {}
    for system, by_width in found.items():
        table[system] = {str(w): {key: median([run[key] for run in runs if key in run])
                                  for key in ("cycles_per_s", "posts_per_s") if any(key in run for run in runs)}
                         for w, runs in by_width.items()}

    def rate(system: str, workers: int) -> float:
        return float(table.get(system, {}).get(str(workers), {}).get("cycles_per_s", float("nan")))

    ratios = {str(w): {"full cycle / ceiling": round(rate("jobboard-full", w) / rate("ceiling", w), 3),
                       **{f"jobboard / {peer}": round(rate("jobboard", w) / rate(peer, w), 1)
                          for peer in ("saq", "arq", "arq-10ms", "taskflow", "zookeeper") if peer in table}}
              for w in widths}
    print(json.dumps({"rounds": args.rounds, "jobs": args.jobs, "medians": table, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
