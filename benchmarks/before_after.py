"""The claim cycle of two commits, run by run on one ZooKeeper: the cost of a change.

    python -m benchmarks.before_after BASE_REV [--runs 6] [--jobs 2000] [--workers 16]

Checks BASE_REV out into a temporary git worktree, then alternates ``python -m
benchmarks.cycle`` of BASE_REV and of this tree against the same server (started here),
and prints one JSON line: each pair's posts/s, cycles/s, requests per cycle and client CPU,
the medians, and the median of the per-pair ratios (this tree / BASE_REV).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.zkserver import ZooKeeperServer, ensure_zookeeper_installed

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("posts_per_s", "cycles_per_s", "zk_requests_per_cycle", "cpu_s")


def cycle(tree: Path, hosts: str, jobs: int, workers: int) -> dict[str, Any]:
    paths = [tree, tree / "backends" / "zookeeper", tree / "backends" / "memory"]
    env = {"PYTHONPATH": ":".join(map(str, paths)), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cycle", "--hosts", hosts, "--jobs", str(jobs),
         "--workers", str(workers), "--repeat", "1"],
        cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=600)
    run: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["runs"][0]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    ensure_zookeeper_installed()
    with tempfile.TemporaryDirectory() as scratch, ZooKeeperServer() as server:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            pairs = [(cycle(base, server.hosts, args.jobs, args.workers),
                      cycle(ROOT, server.hosts, args.jobs, args.workers)) for _ in range(args.runs)]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    report: dict[str, Any] = {"bench": "before_after", "base": args.base, "jobs": args.jobs,
                              "workers": args.workers, "runs": args.runs}
    for name in FIGURES:
        before, after = [p[0][name] for p in pairs], [p[1][name] for p in pairs]
        report[name] = {"base": before, "this": after, "base_median": statistics.median(before),
                        "this_median": statistics.median(after),
                        "ratio_median": round(statistics.median(a / b for a, b in zip(after, before, strict=True)), 3)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
