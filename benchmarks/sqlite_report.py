"""The sqlite:// section of docs/benchmarks.md, rendered from docs/benchmarks/08-sqlite.json (kind ``sqlite``):
each run's output is the JSON line one of the ``benchmarks.sqlite_*`` scripts printed, rendered by the
script that printed it (``benchmark`` key)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Run = dict[str, Any]


def _n(number: float) -> str:
    return f"{number:,.0f}" if abs(number) >= 100 else f"{number:.3g}"


def _span(figure: dict[str, Any]) -> str:
    low, high = figure["range"]
    return f"{_n(figure['median'])} ({_n(low)}–{_n(high)})"


def drivers_lines(output: dict[str, Any]) -> list[str]:
    rows = ["| driver | cycles/s per round | median | ÷ best of its kind |", "|---|---|---|---|"]
    for name, figures in output["drivers"].items():
        rounds = ", ".join(_n(rate) for rate in figures["cycles_per_s"])
        rows.append(f"| `{name}` | {rounds} | {_n(figures['median'])} | {figures['vs_best']:.2f} |")
    return [*rows, "", (f"W = {output['workers']} claimers, {output['jobs']:,} cycles a round, SQLite "
            f"{output['sqlite']} (APSW bundles its own).")]


FIGURE_NAMES = (("posts_per_s", "posts/s"), ("post_many_per_s", "`post_many` jobs/s"), ("cycles_per_s", "cycles/s"),
                ("fused_cycles_per_s", "fused cycles/s"), ("cpu_ms_per_job", "CPU ms per job"))


def compare_lines(output: dict[str, Any]) -> list[str]:
    rows = ["| configuration | " + " | ".join(label for _, label in FIGURE_NAMES) + " |",
            "|---|" + "---|" * len(FIGURE_NAMES)]
    for name, figures in output["results"].items():
        cells = [_span(figures[key]) if key in figures else "" for key, _ in FIGURE_NAMES]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*rows, "", f"Median (range) of {output['rounds']} interleaved rounds, {output['jobs']:,} jobs each."]


def wake_lines(output: dict[str, Any]) -> list[str]:
    rows = ["| waiting processes | posts | median ms | p99 ms | max ms | woken for nothing |", "|---|---|---|---|---|---|"]
    rows += [f"| {r['waiters']} | {r['posts']} | {r['median_ms']:.2f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | "
             f"{r['idle_wakes']} |" for r in output["latency"]]
    idle = output["idle_worker"]
    return [*rows, "", (f"An idle `jobboard worker` process on an empty board: {idle['cpu_s']} s of CPU in "
            f"{idle['seconds']:.0f} s, {idle['percent_of_a_core']:.2f} % of a core.")]


def churn_lines(output: dict[str, Any]) -> list[str]:
    """The WAL outside and inside the reader's holds, from the samples (a hold spans the samples taken
    while it held and the one taken as it was released)."""
    mb, samples, end = 1e6, output["samples"], output["end"]
    in_hold = {i for i, sample in enumerate(samples) if sample["reader_holding"]}
    in_hold |= {i + 1 for i in in_hold}
    free = sorted(sample["wal"] for i, sample in enumerate(samples) if i not in in_hold)
    held = [sample["wal"] for i, sample in enumerate(samples) if i in in_hold]
    return [
        "| figure | value |", "|---|---|",
        f"| jobs consumed | {output['consumed']:,} ({output['cycles_per_s']:,}/s) |",
        (f"| WAL outside the holds ({len(free)} samples): largest, median, MB | {free[-1] / mb:.1f}, "
        f"{free[len(free) // 2] / mb:.1f} |"),
        (f"| WAL during the holds ({output['hold_s']:.0f} s every {output['hold_every_s']:.0f} s): largest, MB | "
        f"{max(held) / mb:.1f} |"),
        f"| largest database file, MB | {max(s['db'] for s in samples) / mb:.2f} |",
        f"| at the end: database, WAL, shm, MB | {end['db'] / mb:.2f}, {end['wal'] / mb:.2f}, {end['shm'] / mb:.2f} |",
        "", f"{output['workers']} worker processes and a poster for {output['minutes']:.0f} minutes, sampled every 5 s.",
    ]


FLEET_FIGURES = (("cycles_per_s", "cycles/s"), ("cpu_ms_per_cycle", "CPU ms"), ("writes_per_cycle", "transactions"),
                 ("turns_per_cycle", "turns taken"), ("turn_waits_per_cycle", "waits for the turn"),
                 ("turn_wait_ms_per_cycle", "ms waiting for it"), ("thread_calls_per_cycle", "calls on the thread"),
                 ("voluntary_per_cycle", "voluntary switches"), ("involuntary_per_cycle", "involuntary switches"))


def fleet_lines(output: dict[str, Any]) -> list[str]:
    """Per process count, the median (range) of each figure; the per-cycle figures are summed over the processes."""
    results = output["results"]
    rows = ["| per cycle | " + " | ".join(f"{count} process{'es' if count != '1' else ''}" for count in results) + " |",
            "|---|" + "---|" * len(results)]
    for key, label in FLEET_FIGURES:
        if any(key in figures for figures in results.values()):
            rows.append(f"| {label} | " + " | ".join(_span(figures[key]) if key in figures else ""
                                                     for figures in results.values()) + " |")
    ratios = "; ".join(f"{count} processes ÷ 1: {', '.join(f'{r:.2f}' for r in ratio['per_round'])} "
                       f"(median {ratio['median']:.2f})" for count, ratio in output["ratios"].items())
    return [*rows, "", (f"{output['rounds']} rounds, {output['jobs']:,} jobs, W = {output['workers']}; per round "
            f"{ratios}; load {', '.join(str(load) for load in output['load'])}. A blank cell: the tree did not count it.")]


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "sqlite_drivers": drivers_lines, "sqlite_compare": compare_lines, "sqlite_wake": wake_lines,
    "sqlite_churn": churn_lines, "sqlite_fleet": fleet_lines,
}


def sqlite_part(run: Run) -> list[str]:
    """One run of a ``benchmarks.sqlite_*`` script, as a table."""
    return RENDERERS[run["output"]["benchmark"]](run["output"])
