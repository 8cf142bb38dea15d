"""sqlite:// side by side with memory:// and Huey's SQLite storage, interleaved rounds, one JSON line.

    python -m benchmarks.sqlite_compare --rounds 3 > docs/benchmarks/sqlite_compare.json

Each round runs every configuration once, as a subprocess of an existing benchmark:
``benchmarks.batches`` (posts 16 in flight, ``post_many``, claim -> consume, fused) on memory://,
sqlite:// (``synchronous=NORMAL``, the default) and sqlite:// ``?synchronous=full``;
``benchmarks.cycle`` on sqlite:// with W = 1, 16 and 64 claimers in one process, and 16 claimers split
over 4 and over 16 processes; ``benchmarks.sqlite_huey`` when ``huey`` is importable (``--huey-python``
names an interpreter that has it). The report gives, per configuration and figure, the median of the
rounds and their range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any


def configs(directory: str, jobs: int, huey_python: str | None) -> dict[str, list[str]]:
    py = [sys.executable, "-m"]
    sqlite = f"sqlite://{directory}/run"
    found = {
        "batches memory": [*py, "benchmarks.batches", "--url", "memory://bench", "--jobs", str(jobs)],
        "batches sqlite": [*py, "benchmarks.batches", "--url", f"{sqlite}?board=b", "--jobs", str(jobs)],
        "batches sqlite full": [*py, "benchmarks.batches", "--url", f"{sqlite}?synchronous=full", "--jobs", str(jobs)],
    }
    for workers in (1, 16, 64):
        found[f"cycle sqlite W={workers}"] = [*py, "benchmarks.cycle", "--url", f"{sqlite}?board=c",
                                              "--jobs", str(jobs), "--workers", str(workers)]
    for processes in (4, 16):
        found[f"cycle sqlite W=16 P={processes}"] = [*py, "benchmarks.cycle", "--url", f"{sqlite}?board=p",
                                                     "--jobs", str(jobs), "--workers", "16",
                                                     "--processes", str(processes)]
    if huey_python:
        found["huey sqlite W=16"] = [huey_python, "-m", "benchmarks.sqlite_huey", "--jobs", str(jobs)]
    return found


FIGURES = ("posts_per_s", "post_many_per_s", "cycles_per_s", "fused_cycles_per_s", "cpu_ms_per_job")


def figures(line: dict[str, Any]) -> dict[str, float]:
    median = line.get("median", line)
    return {key: float(value) for key, value in median.items() if key in FIGURES and isinstance(value, int | float)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--huey-python", default=None)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            for name, command in configs(directory, args.jobs, args.huey_python).items():
                out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=True)
                results.setdefault(name, []).append(figures(json.loads(out.stdout.strip().splitlines()[-1])))
    summary = {name: {key: {"median": round(statistics.median(r[key] for r in runs), 3),
                            "range": [round(min(r[key] for r in runs), 3), round(max(r[key] for r in runs), 3)]}
                      for key in runs[0]} for name, runs in results.items()}
    print(json.dumps({"benchmark": "sqlite_compare", "rounds": args.rounds, "jobs": args.jobs,
                      "load": os.getloadavg()[0], "results": summary}))


if __name__ == "__main__":
    main()
