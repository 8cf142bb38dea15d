"""Helpers shared by the benchmarks: timing, percentiles, medians, CPU and memory readings."""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Sequence
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
