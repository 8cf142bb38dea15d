"""The report's recorded sections: runs of other benchmarks, rendered from the JSON files in docs/benchmarks/.

Each file is one section: a title, where its figures come from (``source``), text without figures
(``intro``, ``after``), parts of one ``kind`` (the benchmark that made them) holding runs, and what
was ``dropped`` because it could not be traced. A run names its date, load, set-up, tree, the
commit that first wrote its figures down and its command; ``output`` holds its figures in the
shape the command prints. Every ratio and range on the page is computed here from those figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.analysis import CLOCK_CHANGE, POST_CONCURRENCY_BEFORE_RECORDED
from benchmarks.instructions import recorded_part as instructions_part
from benchmarks.postgresql_report import (
    postgresql_before_after_part,
    postgresql_bloat_part,
    postgresql_cycle_part,
    postgresql_peers_part,
)
from benchmarks.recorded_fleet import fleet_part, raw_fleet_part
from benchmarks.redis_fleet import recorded_part as redis_fleet_part
from benchmarks.sqlite_report import sqlite_part

Run = dict[str, Any]

TIMED_BY_CYCLE = ("redis_compare", "fleet")
"""Kinds whose figures include ``benchmarks.cycle``'s consume phase (its clock changed at CLOCK_CHANGE)."""


def rate(number: float) -> str:
    return f"{number:,.0f}" if number >= 100 or float(number).is_integer() else f"{number:.1f}"


def times(number: float) -> str:
    return f"{number:.0f}×" if number >= 100 else f"{number:.1f}×"


def lead(run: Run, kind: str) -> str:
    """Where a run's figures come from: when, on what, which tree, which commit wrote them down."""
    clock = (" Timed with `benchmarks.cycle`'s earlier clock (see \"One clock for every system\")."
             if kind in TIMED_BY_CYCLE and run["date"][:16] < CLOCK_CHANGE else "")
    note = f" {run['note'][0].upper()}{run['note'][1:]}." if run.get("note") else ""
    return (f"Run of {run['date']}, load average {run['load']}; {run['setup']}. Tree: {run['tree']}; figures "
            f"first written down in `{run['documented_in']}`.{clock}{note}")


def command_block(run: Run) -> list[str]:
    return ["", f"    {run['command']}", ""]


COMPARED = (("saq", "SAQ 0.26"), ("arq", "arq 0.28, 0.5 s poll"), ("arq-10ms", "arq 0.28, 10 ms poll"),
            ("taskflow", "TaskFlow `RedisJobBoard`"), ("zookeeper", "`zookeeper://`"))


def redis_compare_part(part: dict[str, Any]) -> list[str]:
    """One row per run: jobboard's consume rate, the full cycle against the ceiling, and the peers."""
    lines = ["| run | jobboard `redis://` consume | raw Lua ceiling (full cycle) | jobboard full cycle (÷ ceiling) | "
             + " | ".join(f"{name} (jobboard ×)" for _, name in COMPARED) + " |", "|---" * 9 + "|"]
    notes = []
    for number, run in enumerate(part["runs"], 1):
        medians = run["output"]["medians"]
        figure = {name: float(by_width["16"]["cycles_per_s"]) for name, by_width in medians.items()}
        ours, ceiling, full = figure["jobboard"], figure["ceiling"], figure["jobboard-full"]
        cells = [f"{rate(figure[key])}/s ({times(ours / figure[key])})" for key, _ in COMPARED]
        lines.append(f"| {number}: {run['date']} | **{rate(ours)}**/s | {rate(ceiling)}/s | {rate(full)}/s "
                     f"({100 * full / ceiling:.1f} %) | " + " | ".join(cells) + " |")
        rounds = medians["jobboard"]["16"].get("cycles_per_s_rounds")
        per_round = f" jobboard's consume rate per round: {', '.join(map(rate, rounds))}." if rounds else ""
        notes += [f"{number}. {lead(run, part['kind'])}{per_round} Command:", *command_block(run)]
    return [*lines, "", *notes]


def backlog_part(run: Run) -> list[str]:
    output = run["output"]
    sizes = output["backlogs"]
    rows = ["| backlog | µs a claim → consume cycle, W = " + f"{output['workers']} (median of {output['runs']} runs) |",
            "|---|---|", *(f"| {entry['backlog']:,} | {entry['us_per_cycle']} |" for entry in sizes)]
    flatness = sizes[-1]["us_per_cycle"] / sizes[0]["us_per_cycle"]
    slow, low_high = output["slow_at_largest"], output["slow_at_largest"]["us_per_cycle_range"]
    wake, p90 = output["wake_up_p50_ms_range"], output["wake_up_p90_ms_range"]
    return [*rows, "", (f"Largest ÷ smallest backlog: **{flatness:.2f}** ({'within' if abs(flatness - 1) <= 0.2 else 'outside'} "
            f"±20 %); {slow['runs']} of the {output['runs']} runs took {low_high[0]}–{low_high[1]} µs a cycle at "
            f"the largest. Post → `wait()` on another board woke after a median of **{output['wake_up_p50_ms']} "
            f"ms** (the runs' medians {wake[0]}–{wake[1]} ms, their p90s {p90[0]}–{p90[1]} ms).")]


LABELS = {"posts_per_s": "posts/s ({workers} in flight)", "post_many_per_s": "`post_many`/s (batches of {batch})",
          "cycles_per_s": "cycles/s, W = {workers} (consume, claim_next)",
          "fused_cycles_per_s": "fused cycles/s, W = {workers} (`consume_and_claim_next`)",
          "posts_cpu_us": "client CPU µs per post", "post_many_cpu_us": "client CPU µs per `post_many` job",
          "cycles_cpu_us": "client CPU µs per cycle", "fused_cycles_cpu_us": "client CPU µs per fused cycle"}
BACKENDS = ("memory", "redis", "zookeeper")


def before_after_part(run: Run) -> list[str]:
    output = run["output"]
    backends = [name for name in BACKENDS if name in output]
    lines = ["| figure | " + " | ".join(f"`{name}://` before → after (ratio)" for name in backends) + " |",
             "|---" * (1 + len(backends)) + "|"]
    for key, label in LABELS.items():
        cells = [output[name].get(key) for name in backends]
        if any(cells):
            lines.append(f"| {label.format(**output)} | " + " | ".join(
                "–" if not c else f"{rate(c['base_median'])} → {rate(c['this_median'])}"
                + (f" (**{c['ratio_median']:.2f}**)" if "ratio_median" in c else "") for c in cells) + " |")
    if len(backends) > 1:
        lines += ["", "After ÷ before, median of the per-round ratios: client CPU per job "
                  + ", ".join(f"{span_of(output[name], '_cpu_us')} on `{name}://`" for name in backends)
                  + "; rates " + ", ".join(f"{span_of(output[name], '_per_s')} on `{name}://`" for name in backends)
                  + "."]
    return lines


def span_of(figures: dict[str, Any], suffix: str) -> str:
    ratios = [found["ratio_median"] for key, found in figures.items() if key.endswith(suffix)]
    low, high = min(ratios), max(ratios)
    return f"{low:.2f}" if low == high else f"{low:.2f}–{high:.2f}"


def posts_ratio_part(run: Run) -> list[str]:
    output = run["output"]
    taskflow, vs = output["taskflow_posts_per_s"]["median"], output["this_cycle_posts_vs_taskflow"]

    def row(label: str, figure: str, unit: str = "") -> str:
        base, this = output[f"base_{figure}"], output[f"this_{figure}"]
        return (f"| {label} | {rate(base['median'])}{unit} | {rate(this['median'])}{unit} | "
                f"{this['ratio_median']:.2f}× |")

    low, high = vs.get("range", [vs["median"], vs["median"]])
    return [f"| figure (medians of {output['runs']} rounds) | before | after | ratio (median of per-round ratios) |",
            "|---|---|---|---|",
            row(f"posts/s, {POST_CONCURRENCY_BEFORE_RECORDED} in flight (`benchmarks.cycle`)", "cycle_posts_per_s"),
            (f"| ÷ TaskFlow single-threaded ({rate(taskflow)} posts/s here, one in flight) | "
             f"{times(output['base_cycle_posts_vs_taskflow']['median'])} | **{times(vs['median'])}** (per round: "
             f"{low}–{high}×) | |"),
            row("posts/s, 16 in flight (`benchmarks.batches`)", "batches_posts_per_s"),
            row("client CPU µs per post", "batches_posts_cpu_us"),
            row("`post_many`/s, batches of 2 000", "batches_post_many_per_s"),
            row("client CPU µs per `post_many` job", "batches_post_many_cpu_us"), "",
            (f"jobboard's posting phase keeps {POST_CONCURRENCY_BEFORE_RECORDED} posts in flight, TaskFlow's one "
             "thread one: the issue's \"posts ÷ TaskFlow single-threaded\" is not like for like.")]


def redis_cycle_cost_part(run: Run) -> list[str]:
    medians = run["output"]["median"]
    systems = [("wire", "raw ceiling"), ("jobboard", "jobboard")]
    rows = [("cycles/s", "cycles_per_s"), ("client CPU (user + system), µs", "client_cpu_us"),
            ("server CPU (`INFO cpu`), µs", "server_cpu_us"), ("of which the scripts (`FCALL` / `EVALSHA`), µs",
                                                             "scripts_us"),
            ("of which the event reads (`XREAD`), µs", "xread_us")]
    lines = ["| per cycle | " + " | ".join(name for _, name in systems) + " |", "|---|---|---|"]
    lines += [f"| {label} | " + " | ".join(rate(medians[s][key]) if key in medians[s] else "–" for s, _ in systems)
              + " |" for label, key in rows]
    busy = [(medians[s]["client_cpu_us"] + medians[s]["server_cpu_us"]) * medians[s]["cycles_per_s"] / 1e6
            for s, _ in systems]
    return [*lines, "", (f"(client + server µs) × cycles/s: {busy[0]:.2f} of one core for the ceiling, {busy[1]:.2f} "
            "for jobboard: the client and the server alternate rather than overlap.")]


PER_RUN: dict[str, Callable[[Run], list[str]]] = {
    "backlog": backlog_part, "before_after": before_after_part, "posts_ratio": posts_ratio_part,
    "redis_cycle_cost": redis_cycle_cost_part, "raw_fleet": raw_fleet_part, "redis_fleet": redis_fleet_part}
PER_RUN.update(postgresql_cycle=postgresql_cycle_part, postgresql_bloat=postgresql_bloat_part,
               postgresql_peers=postgresql_peers_part, postgresql_before_after=postgresql_before_after_part)
PER_RUN.update(sqlite=sqlite_part, instructions=instructions_part)


def part_lines(part: dict[str, Any]) -> list[str]:
    lines = [f"**{part['heading']}.**" + (f" {part['intro']}" if part.get("intro") else ""), ""]
    if part["kind"] == "redis_compare":
        return lines + redis_compare_part(part)
    if part["kind"] == "fleet":
        return lines + fleet_part(part["runs"], lambda run: lead(run, "fleet"), command_block)
    for run in part["runs"]:
        lines += [lead(run, part["kind"]), *command_block(run), *PER_RUN[part["kind"]](run), ""]
    return lines


def section(document: dict[str, Any], name: str) -> list[str]:
    lines = [f"## {document['title']}", "", f"Rendered from [docs/benchmarks/{name}](benchmarks/{name}). "
             + document["source"], ""]
    if document.get("intro"):
        lines += [document["intro"], ""]
    for part in document["parts"]:
        lines += part_lines(part)
    if document.get("after"):
        lines += [document["after"], ""]
    if document.get("dropped"):
        lines += ["Left out when this section was first rendered from its JSON (the earlier text: `git show "
                  "fe55d78:docs/benchmarks.md`): " + "; ".join(document["dropped"]) + ".", ""]
    return lines


def recorded_sections(directory: Path) -> list[str]:
    """Every recorded section of ``directory`` (its ``*.json`` files, in name order)."""
    lines: list[str] = []
    for path in sorted(directory.glob("*.json")):
        lines += section(json.loads(path.read_text()), path.name)
    return lines
