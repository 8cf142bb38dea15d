"""The board's posting front (``post_many``'s checks, defaults and encoding) and ``post_many`` per backend.

    python -m benchmarks.posting_front [--urls memory://,sqlite://] [--jobs 20000] [--batch 1000] [--rounds 5]
    python -m benchmarks.posting_front --base REV [--urls ...] [--rounds 5] [--instructions]

A typical posting: ``NewJob("resize", {"url": ..., "n": n})``, no key and no dependencies. Phases:
``front``, the board's ``post_many`` over a backend that writes nothing (what every backend pays before
its own work), and ``post_many <scheme>`` on a fresh board of each URL (``sqlite://`` alone: a fresh
file in a temporary directory; ``postgresql://...``: a fresh ``board=``). Each phase reports jobs/s
and this process's CPU µs per job, and is counted by callgrind under ``benchmarks.instructions``'
environment (:mod:`benchmarks.callgrind`). With ``--base REV``, each round runs one process from
REV's tree (with this tree's ``benchmarks/``) and one from this tree, in alternating order, and
reports medians, ranges and ratios; ``--instructions`` runs them under callgrind instead (noise-free
instructions per job). One JSON line, with the load average before and after.
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
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.callgrind import ENABLED, counting, instructions_in
from benchmarks.common import process_cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("memory", "sqlite", "postgresql")


def fresh(url: str, scratch: str) -> str:
    """A fresh board under ``url``: a new file for ``sqlite://``, a new ``board=`` otherwise."""
    if url.rstrip("/") == "sqlite:":
        return f"sqlite://{scratch}/front-{uuid.uuid4().hex[:8]}.db"
    if url.startswith("memory://"):
        return f"memory://front-{uuid.uuid4().hex[:8]}"
    return f"{url}{'&' if '?' in url else '?'}board=front-{uuid.uuid4().hex[:8]}"


def batches(jobs: int, batch: int) -> list[list[Any]]:
    """The postings, made before any timing: a small details dict each, no key, no dependencies."""
    from jobboard import NewJob
    return [[NewJob("resize", {"url": "https://example.com/a.png", "n": n}) for n in range(start, start + batch)]
            for start in range(0, jobs, batch)]


async def timed(name: str, jobs: int, post_many: Any, work: list[list[Any]]) -> dict[str, float]:
    cpu, started = process_cpu_seconds(), time.perf_counter()
    with counting(name):
        for each in work:
            await post_many(each)
    elapsed = time.perf_counter() - started
    return {f"{name} jobs/s": round(jobs / elapsed), f"{name} cpu_us": round(1e6 * (process_cpu_seconds() - cpu) / jobs, 2)}


async def once(urls: list[str], jobs: int, batch: int) -> dict[str, float]:
    """One process's figures: the front over a backend that writes nothing, then ``post_many`` per URL."""
    from jobboard import open_board
    found: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        async with open_board(fresh("memory://", scratch)) as board:
            async def nothing(prepared: Any) -> list[Any]:
                return []
            board.backend.post_many = nothing  # type: ignore[method-assign,assignment]
            await board.post_many(batches(batch, batch)[0])  # warm
            found |= await timed("front", jobs, board.post_many, batches(jobs, batch))
        for url in urls:
            async with open_board(fresh(url, scratch)) as board:
                await board.post_many(batches(batch, batch)[0])  # warm: the schema, the statements
                scheme = url.partition(":")[0]
                found |= await timed(f"post_many {scheme}", jobs, board.post_many, batches(jobs, batch))
    return found


def tree_env(tree: Path) -> dict[str, str]:
    """``tree``'s library and backends first on the path (its own entry points when it is not this tree)."""
    paths = ([tree / "_entry_points"] if tree != ROOT else []) + [tree] + [tree / "backends" / b for b in BACKENDS]
    return {**os.environ, "PYTHONPATH": ":".join(map(str, paths))}


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """One ``--once`` process from ``tree``: its figures, or under callgrind its instructions per job."""
    command = [sys.executable, "-m", "benchmarks.posting_front", "--once", "--urls", args.urls,
               "--jobs", str(args.jobs), "--batch", str(args.batch)]
    env = tree_env(tree)
    if not args.instructions:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=900)
        return dict(json.loads(done.stdout.splitlines()[-1]))
    with tempfile.TemporaryDirectory() as dumps:
        subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={dumps}/cg.%p",
                        *command], cwd=tree, env={**env, ENABLED: "1"}, check=True, capture_output=True, timeout=1800)
        counted = dict(instructions_in(dump) for dump in Path(dumps).glob("cg.*.*"))
    return {f"{phase} instructions": round(count / args.jobs) for phase, count in counted.items()}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Rounds alternating REV's tree and this one: per figure, each tree's runs, medians and this / base."""
    from benchmarks.before_after import base_tree
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    with ExitStack() as stack:
        trees = {"base": stack.enter_context(base_tree(args.base)), "this": ROOT}
        for index in range(args.rounds):
            order = ["base", "this"] if index % 2 == 0 else ["this", "base"]
            for name in order:
                runs[name].append(run_tree(trees[name], args))
    figures: dict[str, Any] = {}
    for key in runs["this"][0]:
        base, this = [run[key] for run in runs["base"]], [run[key] for run in runs["this"]]
        figures[key] = {"base": base, "this": this, "base median": statistics.median(base),
                        "this median": statistics.median(this),
                        "ratio": round(statistics.median(this) / statistics.median(base), 3)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", default="memory://,sqlite://", help="comma-separated; sqlite:// means a fresh file")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", help="a revision to compare with, alternating processes round by round")
    parser.add_argument("--instructions", action="store_true", help="with --base: count under callgrind")
    parser.add_argument("--once", action="store_true", help="one process's figures (what the rounds run)")
    args = parser.parse_args()
    urls = args.urls.split(",")
    if args.once:
        print(json.dumps(asyncio.run(once(urls, args.jobs, args.batch))))
        return
    load_before = os.getloadavg()
    report: dict[str, Any] = {"bench": "posting_front", "jobs": args.jobs, "batch": args.batch, "rounds": args.rounds,
                              "urls": [url.partition("?")[0] for url in urls], "base": args.base,
                              "instructions": args.instructions}
    if args.base:
        report["figures"] = compare(args)
    else:
        rounds = [run_tree(ROOT, args) for _ in range(args.rounds)]
        report["figures"] = {key: {"median": statistics.median(run[key] for run in rounds),
                                   "range": [min(run[key] for run in rounds), max(run[key] for run in rounds)]}
                             for key in rounds[0]}
    report["load"] = [round(value, 2) for value in (*load_before, *os.getloadavg())]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
