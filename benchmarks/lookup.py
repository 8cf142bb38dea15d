"""Finding one benchmark's result, and its figures, among the JSON lines of a run."""

from __future__ import annotations

from typing import Any

TASKFLOW, KAZOO, CEILING = "taskflow-zookeeper", "kazoo-lockingqueue", "aiozk-ceiling"
FIXED = "aiozk-ceiling-fixed"
"""The raw cycle on the client fixes jobboard uses (its reader, no timer per request, fastwire)."""


def value(result: dict[str, Any] | None, key: str) -> float | None:
    """The median of ``key`` (the peers write ``post_`` where jobboard writes ``posts_``)."""
    median = (result or {}).get("median", {})
    found = median.get(key, median.get(key.replace("posts_", "post_")))
    return float(found) if isinstance(found, (int, float)) else None


def find(results: list[dict[str, Any]], system: str, workers: int, processes: int = 1, *,
         partitioned: bool = False) -> dict[str, Any] | None:
    """The zookeeper:// claim-cycle result of ``system`` at ``workers`` claimers in ``processes``."""
    for result in results:
        if (result.get("system") == system and result.get("workers") == workers and result.get("backend") != "memory"
                and result.get("bench") == "cycle" and bool(result.get("partitions")) == partitioned
                and result.get("processes", 1) == processes and not result.get("interleaved")):
            return result
    return None


def ratio(ours: dict[str, Any] | None, theirs: dict[str, Any] | None, key: str = "cycles_per_s") -> float | None:
    if not ours or not theirs:
        return None
    mine, other = value(ours, key), value(theirs, key)
    return mine / other if mine and other else None


def bench(results: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The first result of benchmark ``name`` (``batches``, ``scaling``, ``dag``)."""
    return next((result for result in results if result.get("bench") == name), None)


def span(values: list[float], form: str = ".1f", unit: str = "") -> str:
    """``low–high`` of ``values`` (one value if they are equal)."""
    low, high = min(values), max(values)
    return f"{low:{form}}{unit}" if f"{low:{form}}" == f"{high:{form}}" else f"{low:{form}}–{high:{form}}{unit}"
