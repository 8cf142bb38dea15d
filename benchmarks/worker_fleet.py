"""Worker processes on one redis:// board: what each pays per job as the fleet grows (issue 28).

    python -m benchmarks.worker_fleet --processes 1,4,16 --concurrency 16 --jobs 2000 --rounds 3 --prefetch 0,16
    python -m benchmarks.worker_fleet ... --base 51583d1      # the same, interleaved with a base commit's library
    python -m benchmarks.worker_fleet --processes 1,16 --per-process 1   # one slot in each process (P = 1: one in all)
    python -m benchmarks.worker_fleet --processes 1,16 --prefetch 0,16 --linger 0,0.002   # ?linger= too, interleaved

One redis-server (AOF off: the disk is not one more shared resource) serves every run. A run: N jobs posted
first, then P processes, each a real :class:`~jobboard.worker.conductor.Worker` (``concurrency`` C / P,
``prefetch`` as given, ``burst``: it stops once nothing is left) running a no-op async handler. Each round
runs every P, and for each every (tree, prefetch) shape, the shapes' order alternating round by round. Per run:

- ``client_cpu_ms_per_job``: the worker processes' CPU (rusage, user + system) from "go" to their worker's
  end (start-up, registration and the last empty claims included: what a worker process pays), over the jobs;
- ``server_cpu_ms_per_job``: ``INFO cpu`` (user + sys) over the phase, over the jobs;
- ``requests_per_job``: what the worker processes' clients sent (counted by wrapping ``RedisClient``'s
  ``call``, ``pipeline`` and ``command`` in each process: the same code counts any tree), ``requests`` by kind
  (each script operation, ``pipeline``: reads such as a claim's status); ``reads_per_job``: the pipelines;
- ``fcalls_per_job``: script calls the server ran (``INFO commandstats``); ``commands_per_job``: every command
  it ran (those inside scripts too);
- ``server_reads_per_job``: the server's socket reads (a pipelined batch is one);
- ``client_sleeps_per_job``: the worker processes' voluntary context switches (an ``epoll_wait`` that slept);
- ``cycles_per_s``: jobs over the time from "go" to the last worker's end.

Prints a Markdown table on stderr and a JSON line (``bench: worker_fleet``: every run, medians and ranges).
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
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.redis_fleet_usage import server_counts, start_together, usage

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("cycles_per_s", "client_cpu_ms_per_job", "server_cpu_ms_per_job", "requests_per_job", "fcalls_per_job",
           "reads_per_job",
           "commands_per_job", "server_reads_per_job", "client_sleeps_per_job")


# -- one worker process ---------------------------------------------------------------------------


def count_requests() -> Counter[str]:
    """Count the requests the board's client sends, by kind: each script call by its operation, ``pipeline``
    (reads: a claim's status, a job's completion) and ``command`` (single commands), in any tree."""
    from jobboard_redis.client import RedisClient

    counted: Counter[str] = Counter()
    for name in ("call", "pipeline", "command"):
        original = getattr(RedisClient, name)

        def wrapped(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            counted[str(args[0]) if _name == "call" else _name] += 1
            return _original(self, *args, **kwargs)

        setattr(RedisClient, name, wrapped)
    return counted


async def worker_process(url: str, concurrency: int, prefetch: int) -> None:
    """``ready`` on stdout; on ``go`` from stdin, a Worker until the board is empty (burst); a JSON line."""
    import anyio

    from jobboard import JobContext, open_board
    from jobboard.worker.conductor import Worker, WorkerConfig

    async def nothing(ctx: JobContext) -> None:
        """A handler that does nothing."""

    counted = count_requests()
    async with open_board(url) as board:
        await board.job_count()  # connected before the measure
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        counted.clear()
        start = usage()
        worker = Worker(board, nothing, WorkerConfig(concurrency=concurrency, prefetch=prefetch, burst=True))
        stats = await worker.run()
        end, ended, requests = usage(), time.time(), dict(counted)
    print(json.dumps({"consumed": stats.consumed, "claimed": stats.claimed, "ended": ended, "requests": requests,
                      **{name: end[name] - start[name] for name in end}}), flush=True)


# -- one run: post, then the fleet ----------------------------------------------------------------


def one_run(url: str, jobs: int, concurrency: int, processes: int, prefetch: int) -> dict[str, Any]:
    """Post ``jobs``, then ``processes`` worker processes of ``concurrency // processes`` slots each."""
    import anyio

    from benchmarks.cycle import post_jobs, run_url
    from jobboard import open_board

    url = run_url(url)

    async def post() -> None:
        async with open_board(url) as producer:
            await post_jobs(producer, jobs)

    anyio.run(post)
    children = [subprocess.Popen([sys.executable, "-m", "benchmarks.worker_fleet", "--child", url, "--concurrency",
                                  str(max(1, concurrency // processes)), "--prefetch", str(prefetch)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    before, started = start_together(children, url)
    parts = [json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1]) for child in children]
    after = server_counts(url)
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    done = max(1, sum(part["consumed"] for part in parts))
    requests: Counter[str] = sum((Counter(part["requests"]) for part in parts), Counter())
    commands = sum(value for name, value in delta.items()
                   if name not in ("cpu_s", "total_reads_processed", "total_writes_processed", "info"))
    return {"processes": processes, "concurrency": concurrency, "prefetch": prefetch, "jobs": done,
            "cycles_per_s": round(done / (max(part["ended"] for part in parts) - started), 1),
            "client_cpu_ms_per_job": round(1000 * sum(part["user_s"] + part["sys_s"] for part in parts) / done, 4),
            "server_cpu_ms_per_job": round(1000 * delta["cpu_s"] / done, 4),
            "fcalls_per_job": round(delta.get("fcall", 0.0) / done, 3),
            "requests_per_job": round(sum(requests.values()) / done, 3),
            "reads_per_job": round(requests["pipeline"] / done, 3),
            "requests": {name: round(count / done, 3) for name, count in sorted(requests.items())},
            "commands_per_job": round(commands / done, 2),
            "server_reads_per_job": round(delta["total_reads_processed"] / done, 3),
            "client_sleeps_per_job": round(sum(part["sleeps"] for part in parts) / done, 3)}


# -- the rounds -----------------------------------------------------------------------------------


def run_in(tree: Path, url: str, jobs: int, concurrency: int, processes: int, prefetch: int) -> dict[str, Any]:
    from benchmarks.redis_fleet import tree_env

    command = [sys.executable, "-m", "benchmarks.worker_fleet", "--one", url, "--jobs", str(jobs),
               "--concurrency", str(concurrency), "--processes", str(processes), "--prefetch", str(prefetch)]
    done = subprocess.run(command, cwd=tree, env=tree_env(tree) if tree != ROOT else None, capture_output=True,
                          text=True, check=True, timeout=900)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median, min and max of each figure."""
    return {name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for name in FIGURES if (values := [run[name] for run in runs if name in run])}


def table(summary: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """One row per shape and P: medians (min–max) of the rounds."""
    lines = [("| shape | P | cycles/s | client CPU ms / job | server CPU ms / job | requests / job | script calls / job "
              "| status reads / job | server socket reads / job | client sleeps / job |"), "|---" * 10 + "|"]
    for key, found in summary.items():
        shape, processes = key.rsplit(" P=", 1)

        def cell(name: str, digits: int, found: dict[str, dict[str, float]] = found) -> str:
            value = found[name]
            return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}–{value['max']:.{digits}f})"

        lines.append(f"| {shape} | {processes} | {cell('cycles_per_s', 0)} | {cell('client_cpu_ms_per_job', 3)} | "
                     f"{cell('server_cpu_ms_per_job', 3)} | {cell('requests_per_job', 2)} | {cell('fcalls_per_job', 2)} | {cell('reads_per_job', 2)} | "
                     f"{cell('server_reads_per_job', 2)} | {cell('client_sleeps_per_job', 2)} |")
    return lines


def ratios(runs: dict[str, list[dict[str, Any]]], counts: list[int]) -> dict[str, dict[str, list[float]]]:
    """Per shape, round by round: client and server CPU per job at the largest P over the smallest."""
    low, high = min(counts), max(counts)
    found: dict[str, dict[str, list[float]]] = {}
    for key, bottoms in runs.items():
        shape, processes = key.rsplit(" P=", 1)
        if int(processes) != low or f"{shape} P={high}" not in runs:
            continue
        pairs = list(zip(bottoms, runs[f"{shape} P={high}"], strict=False))
        found[shape] = {name: [round(top[name] / max(1e-9, bottom[name]), 2) for bottom, top in pairs]
                        for name in ("client_cpu_ms_per_job", "server_cpu_ms_per_job")}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,4,16")
    parser.add_argument("--concurrency", type=int, default=16, help="slots in all, split over the processes")
    parser.add_argument("--per-process", type=int, default=None,
                        help="slots in each process (concurrency = this × P), instead of --concurrency split")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prefetch", default="0,16", help="prefetch of each worker; a list runs each, interleaved")
    parser.add_argument("--linger", default="0",
                        help="the board URL's ?linger= (this tree only); a list runs each, interleaved")
    parser.add_argument("--base", default=None, help="a commit to measure too, interleaved (a git worktree)")
    parser.add_argument("--url", default=None, help="a server to use instead of starting one (redis://host:port)")
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        asyncio.run(worker_process(options.child, options.concurrency, int(options.prefetch)))
        return 0
    if options.one:
        print(json.dumps(one_run(options.one, options.jobs, options.concurrency, int(options.processes),
                                 int(options.prefetch))))
        return 0
    from benchmarks.before_after import base_tree
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    counts, prefetches = [int(p) for p in options.processes.split(",")], [int(n) for n in options.prefetch.split(",")]
    load = [os.getloadavg()]
    with ExitStack() as stack:
        if options.url:
            url = options.url.rstrip("/") + "/0/workers"
        else:
            ensure_redis_installed()
            url = stack.enter_context(RedisServer(appendonly=False)).url("/0/workers")
        trees = [("this", ROOT)] + ([(f"base {options.base}", stack.enter_context(base_tree(options.base)))]
                                    if options.base else [])
        lingers = [float(value) for value in options.linger.split(",")]
        shapes = [(f"{name} prefetch={n}" + (f" linger={linger:g}" if linger else ""), tree, n, linger)
                  for n in prefetches for name, tree in trees for linger in (lingers if tree == ROOT else [0.0])]
        runs: dict[str, list[dict[str, Any]]] = {f"{shape[0]} P={p}": [] for shape in shapes for p in counts}
        for round_number in range(options.rounds):
            for processes in counts:
                for name, tree, prefetch, linger in shapes if round_number % 2 == 0 else shapes[::-1]:
                    slots = options.per_process * processes if options.per_process else options.concurrency
                    board = f"{url}?linger={linger:g}" if linger else url
                    result = run_in(tree, board, options.jobs, slots, processes, prefetch)
                    runs[f"{name} P={processes}"].append(result)
                    print(f"round {round_number + 1}: {name} P={processes}: {result['cycles_per_s']} cycles/s, "
                          f"client {result['client_cpu_ms_per_job']} ms/job", file=sys.stderr, flush=True)
            load.append(os.getloadavg())
    summary = {key: medians(found) for key, found in runs.items()}
    lines = table(summary)
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps({"bench": "worker_fleet", "jobs": options.jobs, "concurrency": options.concurrency,
                      "per_process": options.per_process,
                      "processes": counts, "prefetch": prefetches, "linger": options.linger, "rounds": options.rounds, "base": options.base,
                      "load": [round(one, 2) for one, _, _ in load], "ratios_16_over_1": ratios(runs, counts),
                      "runs": runs, "summary": summary, "table": lines}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
