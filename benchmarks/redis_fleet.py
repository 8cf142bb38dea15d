"""A fleet of claiming processes on one redis:// board: what each process pays as the fleet grows (issue 28).

    python -m benchmarks.redis_fleet --processes 1,4,16 --workers 16 --jobs 2000 --rounds 3
    python -m benchmarks.redis_fleet ... --base bf73266      # the same, interleaved with a base commit's library
    python -m benchmarks.redis_fleet ... --prefetch 0,4,16   # claimers claiming ahead (claim_many), interleaved

One redis-server (AOF off: the disk is not one more shared resource) serves every run. A run: N jobs
posted, then W claimers split over P processes claim_next -> consume until the board is empty (as
``benchmarks.cycle``: a claimer that finds nothing waits in ``board.wait()`` for up to 0.05 s). Each
round runs every P (with ``--base``, on both trees, which goes first alternating). Per run:

- ``events_per_job``: what each process decoded to learn about work and claims (stream entries its
  ``XREAD`` returned, plus notices its ``BLMPOP`` returned), over the jobs it ran, averaged over the
  processes (counted by wrapping the client's two read methods in each process: the same code
  measures any tree);
- ``client_cpu_ms_per_job``: the claiming processes' CPU (rusage) over the jobs;
- ``commands_per_cycle``: ``INFO commandstats`` calls over the phase (commands run inside a script
  counted too), ``fcalls_per_cycle`` the script calls alone, ``reads_per_cycle`` the ``XREAD`` and
  ``BLMPOP`` calls;
- ``empty_claims_per_cycle``: claim_next calls that found nothing (claim attempts that lost, the
  claimers' last look at an empty board included);
- ``server_cpu_ms_per_job``: ``INFO cpu`` (user + sys) over the phase, over the jobs.

Prints a JSON line (``bench: redis_fleet``: every run, the medians and ranges) and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.redis_fleet_usage import (
    SERVER_EVENTS,
    client_usage,
    server_counts,
    server_info,
    start_together,
    usage,
    usage_table,
)

__all__ = ["main", "recorded_part", "section", "server_info", "tree_env"]  # server_info: imported from here too

FIGURES = ("cycles_per_s", "events_per_job", "client_cpu_ms_per_job", "commands_per_cycle", "fcalls_per_cycle",
           "reads_per_cycle", "empty_claims_per_cycle", "lost_claims_per_cycle", "server_cpu_ms_per_job",
           "client_sys_share", "client_sleeps_per_job", "client_preempted_per_job", "tail_cpu_share",
           "server_reads_per_cycle", "server_writes_per_cycle", "client_instructions_per_job")
ROOT = Path(__file__).resolve().parent.parent
IDLE_WAIT = 1.0  # interleaved: seconds an idle claimer waits in board.wait() (it relies on being woken)
PRODUCER_IN_FLIGHT = 20


# -- one claiming process -------------------------------------------------------------------------


def count_reads() -> dict[str, int]:
    """Count what the board's client reads to learn about work: stream entries and notices."""
    from jobboard_redis import client as module

    decoded = {"entries": 0}
    cls = module.RedisClient
    for name in ("read_events", "pop_notices"):
        original = getattr(cls, name, None)
        if original is None:
            continue

        def wrapped(self: Any, *args: Any, _original: Any = original) -> Any:
            async def call() -> Any:
                found = await _original(self, *args)
                decoded["entries"] += len(found)
                return found
            return call()

        setattr(cls, name, wrapped)
    return decoded


async def take(board: Any, owner: str, held: deque[Any], prefetch: int) -> Any:
    """A claimer's next job: one it holds, else a claim call (``claim_many`` of it and ``prefetch`` more)."""
    if not held:
        if not prefetch:
            return await board.claim_next(owner)
        held.extend(await board.claim_many(owner, 1 + prefetch))
    return held.popleft() if held else None


async def settle(board: Any, claim: Any, held: deque[Any], fused: bool, together: bool) -> tuple[Any, int]:
    """Consume ``claim`` (``fused``: and claim the next in the same call); ``together``: with every held job,
    their consumes sent at once (one write, one read: what settling a batch in one call would cost at most)."""
    if fused:
        return await board.consume_and_claim_next(claim), 1
    batch = [claim]
    while together and held:
        batch.append(held.popleft())
    await asyncio.gather(*(board.consume(one) for one in batch))
    return None, len(batch)


async def claim_process(url: str, workers: int, done: str | None, fused: bool = False, warm: bool = False,
                        prefetch: int = 0, together: bool = False) -> None:
    """``ready`` on stdout, then on ``go`` from stdin: claim until the board is empty (and, with ``done``, that
    file exists: the producer has posted every job); a JSON line. ``fused``: each claimer consumes and claims
    its next job in one call (``consume_and_claim_next``, as a worker's slot does); ``warm``: one
    ``claim_next`` and ``job_count`` on a board of no jobs before ``ready`` (paid outside the measure);
    ``prefetch``: each claimer claims its job and up to ``prefetch`` more in one call (``claim_many``, as a
    worker with ``prefetch`` does), and runs the held ones before claiming again (``together``: all at once)."""
    import anyio

    from benchmarks.callgrind import counting
    from benchmarks.common import process_cpu_seconds
    from jobboard import open_board

    decoded = count_reads()
    async with open_board(url) as board:
        if warm:
            await board.claim_next("warm-up", names=["warm-up: no such name"])
            await board.job_count()
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        cpu, before, start = process_cpu_seconds(), decoded["entries"], usage()
        tally = {"cycles": 0, "empty": 0, "lost": 0, "last": 0.0, "idle_from": cpu, "idle_after": 0}

        async def claimer(index: int) -> None:
            offered = False  # the last wait() returned work
            claim = None
            held: deque[Any] = deque()  # claimed ahead (prefetch)
            while True:
                if claim is None or not fused:
                    claim = await take(board, f"c{index}", held, prefetch)
                if claim is None:
                    tally["empty"] += 1
                    if tally["idle_after"] != tally["cycles"]:  # the first empty claim since a cycle: the tail starts
                        tally["idle_after"], tally["idle_from"] = tally["cycles"], process_cpu_seconds()
                    tally["lost"] += offered
                    if (done is None or await anyio.Path(done).exists()) and await board.job_count() == 0:
                        return
                    offered = False
                    with anyio.move_on_after(0.05 if done is None else IDLE_WAIT):
                        offered = bool(await board.wait())
                    continue
                offered = False
                claim, count = await settle(board, claim, held, fused, together)
                tally["cycles"] += count
                tally["last"] = time.time()

        with counting("fleet"):
            async with anyio.create_task_group() as group:
                for index in range(workers):
                    group.start_soon(claimer, index)
        end = usage()
        result = {**tally, "cpu_s": process_cpu_seconds() - cpu, "tail_cpu_s": process_cpu_seconds() - tally["idle_from"],
                  "decoded": decoded["entries"] - before, **{name: end[name] - start[name] for name in end}}
    print(json.dumps(result), flush=True)


# -- one run: post, then the fleet ----------------------------------------------------------------


async def post(url: str, jobs: int, in_flight: int | None = None) -> None:
    import anyio

    from benchmarks.cycle import post_jobs
    from jobboard import open_board

    async with open_board(url) as producer:
        if in_flight is None:
            await post_jobs(producer, jobs)
            return
        limiter = anyio.CapacityLimiter(in_flight)

        async def one(index: int) -> None:
            async with limiter:
                await producer.post("bench", {"i": index})

        async with anyio.create_task_group() as group:
            for index in range(jobs):
                group.start_soon(one, index)


def one_run(url: str, jobs: int, workers: int, processes: int, interleaved: bool,
            extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Post, then the fleet; or (``interleaved``) the fleet while one producer posts, with 20 in flight."""
    from benchmarks.callgrind import ENABLED, instructions_in
    from benchmarks.cycle import run_url

    url = run_url(url)
    done = Path(tempfile.mkdtemp()) / "posted"
    if not interleaved:
        asyncio.run(post(url, jobs))
    dumps = done.parent
    valgrind = (["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={dumps}/cg.%p"]
                if os.environ.get(ENABLED) else [])
    children = [subprocess.Popen([*valgrind, sys.executable, "-m", "benchmarks.redis_fleet", "--child", url,
                                  "--workers", str(max(1, workers // processes)),
                                  *(["--done", str(done)] if interleaved else []), *extra],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    before, started = start_together(children, url)
    if interleaved:
        asyncio.run(post(url, jobs, PRODUCER_IN_FLIGHT))
        done.touch()
    parts = [json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1]) for child in children]
    after = server_counts(url)
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    cycles = max(1, sum(part["cycles"] for part in parts))
    per_process = [part["decoded"] / max(1, part["cycles"]) for part in parts]
    counted = sum(count for name, count in map(instructions_in, dumps.glob("cg.*.*")) if name == "fleet")
    return {"processes": processes, "workers": workers, "jobs": jobs, "cycles": cycles,
            "cycles_per_s": round(cycles / (max(part["last"] for part in parts) - started), 1),
            "events_per_job": round(statistics.mean(per_process), 2),
            "client_cpu_ms_per_job": round(1000 * sum(part["cpu_s"] for part in parts) / cycles, 4),
            "commands_per_cycle": round(sum(v for k, v in delta.items()
                                            if k != "cpu_s" and k not in SERVER_EVENTS) / cycles, 2),
            "fcalls_per_cycle": round(delta.get("fcall", 0.0) / cycles, 3),
            "reads_per_cycle": round((delta.get("xread", 0.0) + delta.get("blmpop", 0.0)) / cycles, 3),
            "empty_claims_per_cycle": round(sum(part["empty"] for part in parts) / cycles, 4),
            "lost_claims_per_cycle": round(sum(part["lost"] for part in parts) / cycles, 4),
            "server_cpu_ms_per_job": round(1000 * delta["cpu_s"] / cycles, 4),
            **client_usage(parts, cycles),
            "server_reads_per_cycle": round(delta["total_reads_processed"] / cycles, 3),
            "server_writes_per_cycle": round(delta["total_writes_processed"] / cycles, 3),
            **({"client_instructions_per_job": round(counted / cycles)} if valgrind else {})}


# -- the rounds -----------------------------------------------------------------------------------


def tree_env(tree: Path) -> dict[str, str]:
    from benchmarks.before_after import METADATA

    paths = [tree / METADATA, tree] + [tree / "backends" / name for name in ("zookeeper", "redis", "memory")]
    return {**os.environ, "PYTHONPATH": ":".join(map(str, paths))}


def run_in(tree: Path, url: str, jobs: int, workers: int, processes: int, interleaved: bool,
           extra: tuple[str, ...] = ()) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.redis_fleet", "--one", url, "--jobs", str(jobs),
               "--workers", str(workers), "--processes", str(processes), *(["--interleaved"] if interleaved else []),
               *extra]
    done = subprocess.run(command, cwd=tree, env=tree_env(tree) if tree != ROOT else None, capture_output=True,
                          text=True, check=True, timeout=900)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure the runs have."""
    found = {}
    for name in FIGURES:
        values = [run[name] for run in runs if name in run]
        if values:
            found[name] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return found


def table(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One row per (tree, P): medians (min–max) of the rounds."""
    lines = [("| tree | P | cycles/s | events decoded / job run, per process | client CPU ms / job | "
              "server commands / cycle (script calls, blocking reads) | empty claims / cycle (lost after a wake-up) "
              "| server CPU ms / job |"),
             "|---|---|---|---|---|---|---|---|"]
    for key, found in summary.items():
        tree, processes = key.rsplit(" P=", 1)

        def cell(name: str, digits: int = 2, found: dict[str, Any] = found) -> str:
            value = found[name]
            return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}–{value['max']:.{digits}f})"

        lost = f" ({found['lost_claims_per_cycle']['median']:.3f})" if "lost_claims_per_cycle" in found else ""
        lines.append(f"| {tree} | {processes} | {cell('cycles_per_s', 0)} | {cell('events_per_job')} | "
                     f"{cell('client_cpu_ms_per_job', 3)} | {cell('commands_per_cycle', 1)} "
                     f"({found['fcalls_per_cycle']['median']:.2f}, {found['reads_per_cycle']['median']:.3f}) | "
                     f"{cell('empty_claims_per_cycle', 3)}{lost} | {cell('server_cpu_ms_per_job', 3)} |")
    return lines


def section(result: dict[str, Any]) -> list[str]:
    """The report's section (``benchmarks.report``) for one result of this benchmark."""
    shape = "one producer posting while the fleet claims" if result.get("interleaved") else "posted first"
    claimers = (f"{result['per_process']} claimers in each process" if result.get("per_process")
                else f"W = {result['workers']} claimers split over P processes")
    return [f"## A fleet on one redis:// board: {', '.join(map(str, result['processes']))} processes", "",
            (f"{result['jobs']} jobs ({shape}), {claimers}, "
                 f"{result['rounds']} interleaved rounds, medians (min–max); one redis-server, AOF off. Per process: "
                 "the stream entries and notices its board decoded per job it ran; the server's figures from "
                 "`INFO commandstats` and `INFO cpu` over the phase (`benchmarks/redis_fleet.py`, "
                 "docs/backends/redis.md \"The fleet\")."), "", *result["table"], ""]


def recorded_part(run: dict[str, Any]) -> list[str]:
    """A recorded run of this benchmark (``benchmarks.recorded``): its table, computed again from its runs."""
    summary = {key: medians(found) for key, found in run["output"]["runs"].items()}
    usage = usage_table(summary)
    return table(summary) + (["", *usage] if usage else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,4,16")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-process", type=int, default=None,
                        help="claimers in each process (W = this × P), instead of W in all")
    parser.add_argument("--base", default=None, help="a commit to measure too, interleaved (a git worktree)")
    parser.add_argument("--url", default=None, help="a server to use instead of starting one (redis://host:port)")
    parser.add_argument("--interleaved", action="store_true",
                        help="one producer posts (20 in flight) while the fleet claims; idle claimers wait 1 s")
    parser.add_argument("--fused", action="store_true",
                        help="claimers call consume_and_claim_next (one call a job, as a worker does), not two calls")
    parser.add_argument("--warm", action="store_true",
                        help="each process makes one empty claim before 'ready' (its first call outside the measure)")
    parser.add_argument("--prefetch", default="0",
                        help="claims ahead per claimer (claim_many of 1 + N); a list (0,4) runs each, interleaved")
    parser.add_argument("--together", action="store_true",
                        help="with --prefetch: a claimer consumes its held jobs at once (a settle batch's bound)")
    parser.add_argument("--done", help=argparse.SUPPRESS)
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    extra = (*(["--fused"] if options.fused else []), *(["--warm"] if options.warm else []),
             *(["--together"] if options.together else []))
    if options.child:
        asyncio.run(claim_process(options.child, options.workers, options.done, options.fused, options.warm,
                                  int(options.prefetch), options.together))
        return 0
    if options.one:
        print(json.dumps(one_run(options.one, options.jobs, options.workers, int(options.processes),
                                       options.interleaved, (*extra, "--prefetch", options.prefetch))))
        return 0
    if any(prefetches := [int(n) for n in options.prefetch.split(",")]) and options.fused:
        parser.error("--fused and --prefetch N (N > 0) are not combined: a claimer holding jobs consumes alone")
    from benchmarks.before_after import base_tree
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    counts = [int(p) for p in options.processes.split(",")]
    with ExitStack() as stack:
        if options.url:
            url = options.url.rstrip("/") + "/0/fleet"
        else:
            ensure_redis_installed()
            url = stack.enter_context(RedisServer(appendonly=False)).url("/0/fleet")
        trees = [("this", ROOT)] + ([(f"base {options.base}", stack.enter_context(base_tree(options.base)))]
                                    if options.base else [])
        shapes = [(f"{name}{f' prefetch={n}' if prefetches != [0] else ''}", tree, n)
                  for n in prefetches for name, tree in trees]
        runs: dict[str, list[dict[str, Any]]] = {f"{name} P={p}": [] for name, _, _ in shapes for p in counts}
        for round_number in range(options.rounds):
            for processes in counts:
                order = shapes if round_number % 2 == 0 else shapes[::-1]
                for name, tree, ahead in order:
                    workers = options.per_process * processes if options.per_process else options.workers
                    result = run_in(tree, url, options.jobs, workers, processes, options.interleaved,
                                    (*extra, *(["--prefetch", str(ahead)] if ahead else [])))
                    runs[f"{name} P={processes}"].append(result)
                    print(f"round {round_number + 1}: {name} P={processes}: {result['cycles_per_s']} cycles/s, "
                          f"{result['events_per_job']} events/job", file=sys.stderr, flush=True)
    summary = {key: medians(found) for key, found in runs.items()}
    lines = table(summary)
    print("\n".join([*lines, "", *usage_table(summary)]), file=sys.stderr)
    print(json.dumps({"bench": "redis_fleet", "interleaved": options.interleaved, "per_process": options.per_process,
                      "fused": options.fused, "warm": options.warm, "prefetch": prefetches, "together": options.together,
                      "jobs": options.jobs, "workers": options.workers,
                      "processes": counts, "rounds": options.rounds, "base": options.base,
                      "runs": runs, "summary": summary, "table": lines}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
