"""The postgresql:// part of docs/benchmarks.md: one run of ``benchmarks.postgresql_cycle`` (and the bloat
run of ``benchmarks.postgresql_bloat``), rendered from what those commands print."""

from __future__ import annotations

from typing import Any

Run = dict[str, Any]


def span(figure: dict[str, Any], digits: int = 0) -> str:
    runs = figure["runs"]
    low, high = min(runs), max(runs)
    text = f"{figure['median']:,.{digits}f}"
    return text if len(runs) == 1 else f"{text} ({low:,.{digits}f}–{high:,.{digits}f})"


def postgresql_cycle_part(run: Run) -> list[str]:
    """The driver comparison, the board's rates, claim cost by backlog and the wake-up, medians and ranges."""
    output = run["output"]
    drivers, board = output["drivers_cycles_per_s"], output["board"]
    ratio = drivers["asyncpg"]["median"] / drivers["psycopg3"]["median"]
    big = next(key for key in output if key.startswith("claim_ms_") and key != "claim_ms_1k")
    flat = output[big]["median"] / output["claim_ms_1k"]["median"]
    workers = output["workers"]
    return [
        f"| figure (W = {workers}, one process; median (range) of the runs) | value |", "|---|---|",
        f"| raw claim + consume cycles/s through asyncpg | {span(drivers['asyncpg'])} |",
        f"| raw claim + consume cycles/s through psycopg 3 | {span(drivers['psycopg3'])} |",
        f"| asyncpg ÷ psycopg 3 | {ratio:.2f}× |",
        f"| the board's cycle (`claim_next`, then `consume_and_claim_next`) /s | {span(board['cycles_per_s'])} |",
        f"| `post_many` jobs/s (batches of 1,000) | {span(board['post_many_per_s'])} |",
        f"| posts/s, {workers} in flight | {span(output['posts_per_s'])} |",
        f"| one claim + consume, 1k backlog, ms | {span(output['claim_ms_1k'], 2)} |",
        (f"| one claim + consume, {big.removeprefix('claim_ms_')} backlog, ms | {span(output[big], 2)} "
        f"({flat:.2f}× the 1k figure) |"),
        f"| post → `wait()` on another board, median of 20, ms | {span(output['wake_ms'], 2)} |",
    ]


def postgresql_bloat_part(run: Run) -> list[str]:
    """Dead tuples and size of the hot table over the run, and the trend after the first minute."""
    samples, summary = run["output"]["samples"], run["output"]["summary"]
    lines = ["| s | jobs done | `job` dead tuples | `job` KB | `event` KB | `done` KB |", "|---|---|---|---|---|---|"]
    lines += [f"| {s['t']} | {s['jobs_done']:,} | {s['job']['dead']:,} | {s['job']['kb']:,} | {s['event']['kb']:,} | "
              f"{s['done']['kb']:,} |" for s in samples]
    return [*lines, "", (f"Dead tuples of `job` after the first minute: at most {summary['job_dead_max']:,}; "
            f"least-squares trend {summary['job_dead_slope_per_min']:+,.1f} per minute over "
            f"{summary['seconds'] / 60:.0f} minutes at {summary['rate']} jobs/s.")]


def postgresql_peers_part(run: Run) -> list[str]:
    """jobboard beside each peer of the run: batched posts and the full cycle (one table per W where the run
    measured several), posts one at a time and the wake-up."""
    output = run["output"]
    if not isinstance(output["workers"], list):  # the first runs: one W, pgqueuer only
        return _peers_at_one_w(output)
    systems = {name: figures for name, figures in output.items() if isinstance(figures, dict)}
    ours = systems["jobboard"]
    lines = [f"| system ({output['jobs']:,} jobs) | "
             + " | ".join(f"full cycle W={w}, jobs/s" for w in output["workers"])
             + " | bulk post, jobs/s | posts/s, 16 in flight | post → running, ms |",
             "|---" * (len(output["workers"]) + 4) + "|"]
    for name, figures in systems.items():
        cycles = [_with_ratio(figures[f"cycles_per_s_w{w}"], ours[f"cycles_per_s_w{w}"], name) for w in output["workers"]]
        bulk = figures.get(f"post_many_per_s_w{output['workers'][-1]}")
        lines.append(f"| {name} | " + " | ".join(cycles) + f" | {span(bulk) if bulk else 'no bulk API'} | "
                     f"{span(figures['posts_per_s'])} | {span(figures['wake_ms'], 1)} |")
    return [*lines, "", "Each cycle figure of a peer is followed by jobboard ÷ it (medians)."]


def _with_ratio(figure: dict[str, Any], ours: dict[str, Any], name: str) -> str:
    return span(figure) if name == "jobboard" else f"{span(figure)} ({ours['median'] / figure['median']:.1f}×)"


def _peers_at_one_w(output: dict[str, Any]) -> list[str]:
    ours = output["jobboard"]
    lines = [(f"| system ({output['jobs']:,} jobs, {output['workers']} in flight) | batched posts, jobs/s | "
             "full cycle, jobs/s | jobboard ÷ it (cycle) |"), "|---|---|---|---|"]
    for name, figures in output.items():
        if not isinstance(figures, dict):
            continue
        ratio = ours["cycles_per_s"]["median"] / figures["cycles_per_s"]["median"]
        lines.append(f"| {name} | {span(figures['post_many_per_s'])} | {span(figures['cycles_per_s'])} | "
                     f"{ratio:.2f}× |")
    return lines


def postgresql_before_after_part(run: Run) -> list[str]:
    """``benchmarks.postgresql_before_after``: per W, the base tree's and the head tree's cycles/s (median and
    range), CPU per cycle and statements per cycle (medians)."""
    output = run["output"]
    runs, medians = output["runs"], output["medians"]
    lines = [(f"| W | cycles/s, {output['base']} | cycles/s, {output['head']} | client µs per cycle | "
              "server µs per cycle | statements per cycle |"), "|---|---|---|---|---|---|"]
    for w in medians["base"]:
        base, head = medians["base"][w], medians["head"][w]

        def figure(tree: str, key: str, w: str = w) -> dict[str, Any]:
            return {"median": medians[tree][w][key], "runs": [item[w][key] for item in runs[tree]]}

        lines.append(f"| {w.removeprefix('w')} | {span(figure('base', 'cycles_per_s'))} | "
                     f"{span(figure('head', 'cycles_per_s'))} | {base['client_us_per_cycle']:.0f} → "
                     f"{head['client_us_per_cycle']:.0f} | {base['server_us_per_cycle']:.0f} → "
                     f"{head['server_us_per_cycle']:.0f} | {base['round_trips_per_cycle']:.2f} → "
                     f"{head['round_trips_per_cycle']:.2f} |")
    return [*lines, "", f"{len(runs['base'])} runs of each tree, alternated; medians (ranges)."]
