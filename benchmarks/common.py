"""Helpers shared by the benchmarks: timing, percentiles, medians, CPU and memory readings, the command line."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def percentile(ordered: Sequence[float], percent: float) -> float:
    """The ``percent`` percentile of already sorted values (nearest rank)."""
    index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))
    return ordered[index]


def median_of(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric field: the median over runs, and the min-max range."""
    summary: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if isinstance(run.get(key), (int, float))]
        if values and len(values) == len(runs):
            summary[key] = round(statistics.median(values), 2)
            summary[f"{key}_range"] = [min(values), max(values)]
    return summary


def process_cpu_seconds() -> float:
    """CPU seconds of this process (user + system, all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) another process has used so far, from /proc."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mib() -> float:
    """Resident memory of this process, MiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def print_json_of(prog: str, measure: Callable[..., Any], *, url: bool = True, **defaults: float | str) -> None:
    """The command ``python -m benchmarks.<prog> --url URL [--NAME VALUE ...]``: print ``measure(url, **options)``
    (awaited when it is a coroutine function) as one JSON line; with ``url=False``, no ``--url`` (the benchmark
    makes its own storage).

    ``defaults`` names the options (``--NAME``) and their defaults; each value is parsed as its default's type.
    """
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{prog}")
    if url:
        parser.add_argument("--url", required=True)
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    options = vars(parser.parse_args())
    result = measure(**options)
    print(json.dumps(asyncio.run(result) if inspect.iscoroutine(result) else result))
