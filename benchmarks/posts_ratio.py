"""Posting rates before and after a change, beside TaskFlow's, interleaved on one ZooKeeper (forceSync on).

    python -m benchmarks.posts_ratio BASE_REV [--runs 5]

Each round runs, on a fresh server and each in its own process: TaskFlow's single-threaded posts
(``benchmarks.peers.taskflow_board --workers 1``, 1 000 jobs), the posting phase of
``benchmarks.cycle`` (1 000 jobs, 64 in flight) and ``benchmarks.batches`` (10 000 jobs, posts 16
in flight, ``post_many`` in batches of 2 000) on BASE_REV and on this tree, alternating which goes
first: the commands ``benchmarks.run`` uses for the issue's "posts ÷ TaskFlow single-threaded" and
"``post_many`` jobs/s". Prints one JSON line: per figure the values, the medians, and the median of
the per-round ratios. Needs the peers (``pip install -e '.[zookeeper,bench]'``, as ``scripts/bench``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.before_after import ROOT, base_tree, run_module
from tests.support.zkserver import ZooKeeperServer, ensure_zookeeper_installed


def run(tree: Path, args: list[str]) -> dict[str, Any]:
    return run_module(tree, args, timeout=900)


def one_round(server: ZooKeeperServer, trees: dict[str, Path], first: str) -> dict[str, float]:
    hosts, got = server.hosts, {}
    got["taskflow_posts_per_s"] = run(ROOT, ["benchmarks.peers.taskflow_board", "--hosts", hosts, "--jobs", "1000",
                                             "--workers", "1", "--repeat", "1"])["post_per_s"]
    order = [first, *(name for name in trees if name != first)]
    for name in order:
        cycle = run(trees[name], ["benchmarks.cycle", "--hosts", hosts, "--jobs", "1000", "--zk-pid", str(server.pid),
                                  "--workers", "16", "--repeat", "1"])
        got[f"{name}_cycle_posts_per_s"] = cycle["posts_per_s"]
    for name in order:
        batches = run(trees[name], ["benchmarks.batches", "--url", f"zookeeper://{hosts}/bench/batches", "--jobs",
                                    "10000", "--batch", "2000", "--workers", "16", "--repeat", "1"])
        for figure in ("posts_per_s", "post_many_per_s", "posts_cpu_us", "post_many_cpu_us"):
            got[f"{name}_batches_{figure}"] = batches[figure]
    for name in trees:
        got[f"{name}_cycle_posts_vs_taskflow"] = got[f"{name}_cycle_posts_per_s"] / got["taskflow_posts_per_s"]
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ensure_zookeeper_installed()
    rounds: list[dict[str, float]] = []
    with base_tree(args.base) as base:
        for index in range(args.runs):
            with ZooKeeperServer(fsync=True) as server:
                rounds.append(one_round(server, {"base": base, "this": ROOT}, "base" if index % 2 == 0 else "this"))
    report: dict[str, Any] = {"bench": "posts_ratio", "base": args.base, "runs": args.runs}
    for figure in rounds[0]:
        values = [one[figure] for one in rounds]
        report[figure] = {"values": [round(value, 1) for value in values], "median": round(statistics.median(values), 1)}
        if figure.startswith("this_"):
            before = [one["base_" + figure.removeprefix("this_")] for one in rounds]
            report[figure]["ratio_median"] = round(statistics.median(a / b for a, b in zip(values, before, strict=True)), 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
