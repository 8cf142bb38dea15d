"""The cost of a change: two commits' benchmarks, run by run against the same servers.

    python -m benchmarks.before_after BASE_REV [--runs 6] [--jobs 2000] [--workers 16]
    python -m benchmarks.before_after BASE_REV --bench batches --backends memory,redis,zookeeper [--batch 100]

Checks BASE_REV out into a temporary git worktree (with this tree's ``benchmarks/``, so that
the same benchmark code measures both libraries), then alternates the benchmark on BASE_REV
and on this tree (each in its own process, which goes first alternating from run to run)
against the same servers (started here), and prints one JSON line: per backend and figure,
each pair's values, the medians, and the median of the per-pair ratios (this tree / BASE_REV).
``--bench cycle`` (the default, on ZooKeeper) runs ``benchmarks.cycle``: posts/s, cycles/s,
requests per cycle and client CPU; ``--bench batches`` runs ``benchmarks.batches``: posts/s
(16 in flight), ``post_many``/s, W-claimer cycles/s and fused cycles/s, and the client's CPU
microseconds per job of each (``*_cpu_us``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tests.support.redisserver import RedisServer, ensure_redis_installed
from tests.support.zkserver import ZooKeeperServer, ensure_zookeeper_installed

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def base_tree(rev: str) -> Iterator[Path]:
    """``rev`` checked out in a temporary git worktree with this tree's ``benchmarks/`` (so that the
    same benchmark code measures both libraries); removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), rev], cwd=ROOT, check=True,
                       capture_output=True)
        shutil.copytree(ROOT / "benchmarks", base / "benchmarks", dirs_exist_ok=True)
        own_entry_points(base)
        try:
            yield base
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)


METADATA = "_entry_points"
"""Where a tree's own ``jobboard.backends`` entry points are written (first on its ``PYTHONPATH``): the
installed metadata names this tree's backend classes, which an older tree may not have."""


def own_entry_points(tree: Path) -> None:
    """A ``jobboard`` dist-info in ``tree/_entry_points`` with the entry points of ``tree``'s pyproject.toml."""
    project = tomllib.loads((tree / "pyproject.toml").read_text())
    backends = project["project"]["entry-points"]["jobboard.backends"]
    info = tree / METADATA / "jobboard-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jobboard\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[jobboard.backends]\n" + "".join(f"{name} = {value}\n" for name, value in backends.items()))


FIGURES = {"cycle": ("posts_per_s", "cycles_per_s", "zk_requests_per_cycle", "cpu_s"),
           "batches": ("posts_per_s", "post_many_per_s", "cycles_per_s", "fused_cycles_per_s", "posts_cpu_us",
                       "post_many_cpu_us", "cycles_cpu_us", "fused_cycles_cpu_us")}


def run_module(tree: Path, module_args: list[str], timeout: float = 600) -> dict[str, Any]:
    """``python -m MODULE ARGS...`` with ``tree``'s library (and its backends): its first run's figures."""
    paths = [tree / METADATA, tree] + [tree / "backends" / name for name in ("zookeeper", "redis", "memory")]
    env = {"PYTHONPATH": ":".join(map(str, paths)), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", *module_args], cwd=tree, env=env, capture_output=True, text=True,
                          check=True, timeout=timeout)
    report: dict[str, Any] = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return dict(report["runs"][0])


def run_bench(tree: Path, bench: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``bench`` from ``tree`` on a fresh board under ``url``: its figures."""
    extra = ["--batch", str(args.batch)] if bench == "batches" else []
    return run_module(tree, [f"benchmarks.{bench}", "--url", url, "--jobs", str(args.jobs),
                             "--workers", str(args.workers), "--repeat", "1", *extra])


def board_urls(stack: ExitStack, backends: list[str]) -> dict[str, str]:
    """A board URL per backend, starting the servers they need."""
    urls = {}
    for backend in backends:
        if backend == "memory":
            urls[backend] = "memory://before-after"
        elif backend == "redis":
            ensure_redis_installed()
            urls[backend] = stack.enter_context(RedisServer(appendonly=False)).url("/0/before-after")
        elif backend == "zookeeper":
            ensure_zookeeper_installed()
            urls[backend] = f"zookeeper://{stack.enter_context(ZooKeeperServer()).hosts}/before-after"
        else:
            raise SystemExit(f"unknown backend {backend!r}: use memory, redis or zookeeper")
    return urls


def summary(pairs: list[tuple[dict[str, Any], dict[str, Any]]], figures: tuple[str, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in figures:
        before, after = [p[0][name] for p in pairs], [p[1][name] for p in pairs]
        if not all(before):  # a figure this backend does not have (zk_requests_per_cycle on redis://)
            continue
        found[name] = {"base": before, "this": after, "base_median": statistics.median(before),
                       "this_median": statistics.median(after),
                       "ratio_median": round(statistics.median(a / b for a, b in zip(after, before, strict=True)), 3)}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("--bench", choices=sorted(FIGURES), default="cycle")
    parser.add_argument("--backends", default="zookeeper", help="comma-separated: memory, redis, zookeeper")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100, help="postings per post_many call (--bench batches)")
    args = parser.parse_args()
    backends = args.backends.split(",")
    pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {backend: [] for backend in backends}
    with ExitStack() as stack:
        urls = board_urls(stack, backends)
        base = stack.enter_context(base_tree(args.base))
        for run in range(args.runs):
            for backend in backends:
                trees = [base, ROOT] if run % 2 == 0 else [ROOT, base]
                got = {tree: run_bench(tree, args.bench, urls[backend], args)
                       for tree in trees}
                pairs[backend].append((got[base], got[ROOT]))
    report: dict[str, Any] = {"bench": f"before_after/{args.bench}", "base": args.base, "jobs": args.jobs,
                              "workers": args.workers, "batch": args.batch, "runs": args.runs}
    for backend in backends:
        report[backend] = summary(pairs[backend], FIGURES[args.bench])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
