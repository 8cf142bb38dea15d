"""The client's instructions per job, per phase, in two trees: a cost that the machine's load cannot move.

    python -m benchmarks.instructions BASE_REV [--backends redis,zookeeper] [--workers 1,16,64] [--jobs 600]

On a shared 2-core machine a throughput ratio between two trees moves by ±10-30 % from run to run
(docs/benchmarks.md, "The seam"), which cannot show a 5 % bound. This runs ``benchmarks.batches`` from
BASE_REV's tree and from this tree (``benchmarks.before_after`` makes the trees and the servers) under
``valgrind --tool=callgrind``, counting only each phase (posts, claim -> consume cycles, ``post_many``, fused
cycles; :mod:`benchmarks.callgrind`), and prints one JSON line: per backend, W and phase, the client's
instructions per job in each tree (each tree run ``--runs`` times, alternating) and their ratio (this / base).
The server's work is not counted: both trees send it the same requests (counted in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.before_after import METADATA, base_tree, board_urls
from benchmarks.callgrind import ENABLED, instructions_in

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("posts", "cycles", "post_many", "fused_cycles")
BENCH_PHASES = {"batches": PHASES, "cycle": ("posts", "cycles")}
"""The phases each benchmark counts (``benchmarks.cycle``: W posters, then W claimers on a board of their own)."""


def counted_run(tree: Path, url: str, jobs: int, workers: int, bench: str = "batches") -> dict[str, float]:
    """One ``benchmarks.BENCH`` run from ``tree`` under callgrind: instructions per job of each phase."""
    paths = [tree / METADATA, tree] + [tree / "backends" / name for name in ("zookeeper", "redis", "memory")]
    env = {"PYTHONPATH": ":".join(map(str, paths)), "PATH": "/usr/bin:/bin", ENABLED: "1"}
    with tempfile.TemporaryDirectory() as dumps:
        subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                        f"--callgrind-out-file={dumps}/cg.%p", sys.executable, "-m", f"benchmarks.{bench}",
                        "--url", url, "--jobs", str(jobs), "--workers", str(workers), "--repeat", "1"],
                       cwd=tree, env=env, check=True, capture_output=True, timeout=1800)
        counted = dict(instructions_in(dump) for dump in Path(dumps).glob("cg.*.*"))
    return {phase: round(counted[phase] / jobs) for phase in BENCH_PHASES[bench]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("--backends", default="redis,zookeeper")
    parser.add_argument("--workers", default="1,16,64")
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--bench", choices=sorted(BENCH_PHASES), default="batches")
    args = parser.parse_args()
    report: dict[str, Any] = {"bench": "instructions", "of": args.bench, "base": args.base, "jobs": args.jobs,
                              "runs": args.runs}
    phases = BENCH_PHASES[args.bench]
    with ExitStack() as stack:
        base = stack.enter_context(base_tree(args.base))
        urls = board_urls(stack, args.backends.split(","))
        for backend, url in urls.items():
            for workers in map(int, args.workers.split(",")):
                runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
                for index in range(args.runs):
                    order = [("base", base), ("this", ROOT)]
                    for name, tree in order if index % 2 == 0 else reversed(order):
                        runs[name].append(counted_run(tree, url, args.jobs, workers, args.bench))
                report[f"{backend}/W={workers}"] = {
                    phase: {"base": [run[phase] for run in runs["base"]], "this": [run[phase] for run in runs["this"]],
                            "ratio": round(statistics.median(run[phase] for run in runs["this"])
                                           / statistics.median(run[phase] for run in runs["base"]), 3)}
                    for phase in phases}
                print(json.dumps({f"{backend}/W={workers}": report[f"{backend}/W={workers}"]}), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()


PHASE_LABELS = {"posts": "post (W in flight)", "cycles": "claim → consume cycle", "post_many": "`post_many` (per job)",
                "fused_cycles": "fused cycle"}


def recorded_part(run: dict[str, Any]) -> list[str]:
    """A recorded run as a table: per backend and W, each phase's instructions per job before → after (ratio)."""
    output = run["output"]
    columns = [key for key in output if "/W=" in key]
    lines = ["| phase | " + " | ".join(f"`{key.replace('/', '://` ')}" for key in columns) + " |",
             "|---" * (1 + len(columns)) + "|"]
    phases = BENCH_PHASES[output.get("of", "batches")]
    for phase, label in PHASE_LABELS.items():
        if phase not in phases:
            continue
        cells = [output[key][phase] for key in columns]
        lines.append(f"| {label} | " + " | ".join(
            f"{statistics.median(c['base']):,.0f} → {statistics.median(c['this']):,.0f} (**{c['ratio']:.3f}**)"
            for c in cells) + " |")
    ratios = [output[key][phase]["ratio"] for key in columns for phase in phases]
    spread = max(max(c) / min(c) - 1 for key in columns for phase in phases
                 for c in (output[key][phase]["base"], output[key][phase]["this"]))
    return [*lines, "", (f"Client instructions per job, after ÷ before: {min(ratios):.3f}–{max(ratios):.3f}; the "
                         f"same tree's runs differ by at most {100 * spread:.1f} %.")]
