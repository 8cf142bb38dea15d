"""postgresql:// before and after a change: ``benchmarks.postgresql_costs`` alternated between two trees.

    python -m benchmarks.postgresql_before_after --url postgresql://postgres@127.0.0.1:5432/postgres \
        --base c7cf859 --head 1a8ec24 --runs 6 --jobs 3000 --workers 1,16,64

Checks ``--base`` and ``--head`` out into temporary worktrees (with this tree's ``benchmarks/``, so that
the same benchmark code measures both; the working tree's uncommitted changes are in neither), then runs ``benchmarks.postgresql_costs --runs 1`` from each tree in
turn, in its own process, the order alternating from run to run, each tree in its own schema of the
same server (``?schema=ba_base`` / ``ba_head``: the two trees' schema versions differ). Prints one JSON
object: per tree (``base``, ``head``) and W, each run's cycles/s, client and server CPU µs per cycle and
round trips per cycle (the board's ``Database.run`` calls: statements), the load average at each run's
start, and the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.before_after import METADATA, base_tree
from benchmarks.common import print_json_of


def costs(tree: Path, url: str, jobs: int, workers: str) -> dict[str, Any]:
    """One ``benchmarks.postgresql_costs`` run from ``tree`` (its library and its postgresql backend)."""
    paths = [tree / METADATA, tree, tree / "backends" / "postgresql"]
    env = {**os.environ, "PYTHONPATH": ":".join(map(str, paths))}
    done = subprocess.run([sys.executable, "-m", "benchmarks.postgresql_costs", "--url", url, "--jobs", str(jobs),
                           "--workers", workers, "--runs", "1"], cwd=tree, env=env, capture_output=True, text=True,
                          check=True, timeout=900)
    report: dict[str, Any] = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return {w: {key: figure["median"] for key, figure in figures.items()}
            for w, figures in report.items() if w.startswith("w")}


def medians(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {w: {key: round(statistics.median(item[w][key] for item in items), 2) for key in items[0][w]}
            for w in items[0]}


def main(url: str, base: str, head: str, runs: int, jobs: int, workers: str) -> dict[str, Any]:
    joiner = "&" if "?" in url else "?"
    figures: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    loads: list[float] = []
    with base_tree(base) as base_path, base_tree(head) as head_path:
        trees = {"base": base_path, "head": head_path}
        for number in range(runs):
            for name in ("base", "head") if number % 2 == 0 else ("head", "base"):
                loads.append(round(os.getloadavg()[0], 1))
                figures[name].append(costs(trees[name], f"{url}{joiner}schema=ba_{name}", jobs, workers))
                print(json.dumps({"run": number, "tree": name, **figures[name][-1]}), file=sys.stderr, flush=True)
    return {"base": base, "head": head, "jobs": jobs, "runs": figures, "load": [min(loads), max(loads)],
            "medians": {name: medians(items) for name, items in figures.items()}}


if __name__ == "__main__":
    print_json_of("postgresql_before_after", main, base="HEAD~1", head="HEAD", runs=6, jobs=3000, workers="1,16,64")
