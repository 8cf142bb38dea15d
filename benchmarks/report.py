"""Render the benchmark results (one dict per benchmark run) as docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from benchmarks.analysis import posts_in_flight, reading
from benchmarks.lookup import CEILING, FIXED, KAZOO, TASKFLOW, bench, find, ratio, value
from benchmarks.redis_fleet import section as redis_fleet_section

Companion = tuple[dict[str, Any], list[dict[str, Any]]]
"""Another run's header and results, that the analysis reads beside this run's (the 2000-job run)."""


def spread(result: dict[str, Any], key: str) -> str:
    """``median (min–max)`` of a field."""
    median = result.get("median", {})
    middle = value(result, key)
    if middle is None:
        return "–"
    low, high = median.get(f"{key}_range", median.get(f"{key.replace('posts_', 'post_')}_range", [middle, middle]))
    return f"{middle:,.0f} ({low:,.0f}–{high:,.0f})" if middle >= 100 else f"{middle:.1f} ({low:.1f}–{high:.1f})"


def label(result: dict[str, Any]) -> str:
    name = {"jobboard": "jobboard", TASKFLOW: "TaskFlow ZookeeperJobBoard", KAZOO: "kazoo LockingQueue",
            CEILING: "raw aiozk (ceiling)", FIXED: "raw cycle, jobboard's client fixes (ceiling)"}.get(str(result.get("system")), str(result.get("system")))
    if result.get("backend") == "memory":
        name += " (memory://)"
    if result.get("processes", 1) > 1:
        name += f", {result['processes']} processes"
    if result.get("interleaved"):
        name += ", interleaved"
    if result.get("partitions"):
        name += f", partitioned (K={result['partitions']})"
    return name


def cycle_rows(results: Iterable[dict[str, Any]]) -> list[str]:
    rows = [("| system | W | cycles/s median (min–max) | posts/s | claim p50 / p99 ms | failed claims | "
            "ZK requests / cycle | bench CPU s | ZK CPU s |"), "|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        median = result.get("median", {})
        latency = (f"{median['claim_p50_ms']:.1f} / {median['claim_p99_ms']:.1f}"
                   if median.get("claim_p50_ms") is not None else "–")
        requests = median.get("zk_requests_per_cycle", median.get("zk_requests_per_job", "–"))
        rows.append(f"| {label(result)} | {result.get('workers')} | {spread(result, 'cycles_per_s')} | "
                    f"{spread(result, 'posts_per_s')} | {latency} | {median.get('failed_claims', '–')} | "
                    f"{requests} | {median.get('cpu_s', '–')} | {median.get('zk_cpu_s', '–')} |")
    return rows


def ratio_rows(results: list[dict[str, Any]]) -> list[str]:
    rows = [("| W | jobboard cycles/s | ÷ TaskFlow | ÷ kazoo LockingQueue | ÷ raw ceiling, stock aiozk | "
            "÷ raw ceiling, jobboard's client fixes |"), "|---|---|---|---|---|---|"]
    for workers in sorted({int(r["workers"]) for r in results if r.get("system") == "jobboard" and "workers" in r}):
        ours = find(results, "jobboard", workers)
        if ours is None:
            continue
        cells = [f"{ratio(ours, find(results, peer, workers)):.2f}×" if ratio(ours, find(results, peer, workers))
                 else "–" for peer in (TASKFLOW, KAZOO, CEILING, FIXED)]
        rows.append(f"| {workers} | {value(ours, 'cycles_per_s'):,.0f} | " + " | ".join(cells) + " |")
    return rows


def micros_per_cycle(result: dict[str, Any] | None, key: str) -> float | None:
    """CPU µs per cycle of one CPU figure (``cpu_s`` of the client, ``zk_cpu_s`` of the server)."""
    if not result:
        return None
    cpu, cycles = value(result, key), value(result, "cycles") or result.get("jobs")
    return 1e6 * cpu / float(cycles) if cpu is not None and cycles else None


def cost_rows(results: list[dict[str, Any]]) -> list[str]:
    """Where a cycle's CPU goes: the client's and the server's, jobboard against the raw ceiling."""
    rows = [("| W | jobboard client µs / cycle | ceiling client µs / cycle | jobboard server µs / cycle | "
             "ceiling server µs / cycle |"), "|---|---|---|---|---|"]
    for workers in (1, 4, 16, 64):
        ours, ceiling = find(results, "jobboard", workers), find(results, FIXED, workers)
        cells = [micros_per_cycle(r, key) for key in ("cpu_s", "zk_cpu_s") for r in (ours, ceiling)]
        if any(cell is not None for cell in cells):
            rows.append(f"| {workers} | " + " | ".join("–" if c is None else f"{c:.0f}" for c in cells) + " |")
    return rows


def fleet_rows(results: list[dict[str, Any]]) -> list[str]:
    """The same total W split over 1, 4, 16 processes: throughput, fan-out, CPU per job."""
    rows = [("| W in total | processes | cycles/s (min–max) | ÷ one process | notifications / job / process | "
            "per job it runs | server requests / cycle | server notifications / cycle | client CPU ms / job | "
            "server CPU ms / job |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for result in sorted((r for r in results if r.get("bench") == "cycle" and r.get("system") == "jobboard"
                          and r.get("backend") == "zookeeper" and not r.get("interleaved")),
                         key=lambda r: (r.get("workers", 0), r.get("processes", 1))):
        workers, median = result.get("workers", 0), result.get("median", {})
        if workers not in (16, 64):
            continue
        one = ratio(result, find(results, "jobboard", workers))
        layout = f" (K={result['partitions']})" if result.get("partitions") else ""
        rows.append(f"| {workers} | {result.get('processes', 1)}{layout} | {spread(result, 'cycles_per_s')} | "
                    f"{f'{one:.2f}×' if one else '–'} | {median.get('notifications_per_job_per_process', '–')} | "
                    f"{median.get('notifications_per_own_job', '–')} | "
                    f"{median.get('server_requests_per_cycle', '–')} | "
                    f"{median.get('server_notifications_per_cycle', '–')} | {median.get('cpu_ms_per_job', '–')} | "
                    f"{median.get('zk_cpu_ms_per_job', '–')} |")
    return rows


def scaling_rows(result: dict[str, Any]) -> list[str]:
    rows = ["| backlog | open + list s | RSS with it listed MiB | cycles/s (min–max) | ZK requests / cycle |",
            "|---|---|---|---|---|"]
    for entry in result.get("results", []):
        median = entry["median"]
        rows.append(f"| {entry['backlog']:,} | {median['open_and_list_s']} | {median['rss_listed_mib']} | "
                    f"{spread(entry, 'cycles_per_s')} | {median['zk_requests_per_cycle']} |")
    return rows


def met(ok: bool | None) -> str:
    return "–" if ok is None else ("met" if ok else "**not met**")


def process_rows(results: list[dict[str, Any]]) -> list[str]:
    """The issue's goals for one process against the raw ceiling, and for a fleet against one process."""
    lines = []
    for workers in (1, 4, 16, 64):
        r = ratio(find(results, "jobboard", workers), find(results, FIXED, workers))
        lines.append(f"| one process ≥ 90 % of the raw ceiling (client fixes), W={workers} | "
                     f"{f'{100 * r:.0f} %' if r else '–'} | {met(r >= 0.9 if r else None)} |")
    for partitioned in (False, True):
        layout = "partitioned board" if partitioned else "flat board"
        for workers in (16, 64):
            for processes, goal in ((4, 1.0), (16, 0.8)):
                r = ratio(find(results, "jobboard", workers, processes, partitioned=partitioned),
                          find(results, "jobboard", workers))
                lines.append(f"| {processes} processes ≥ {goal:.1f}× one process, W={workers} in total, {layout} | "
                             f"{f'{r:.2f}×' if r else '–'} | {met(r >= goal if r else None)} |")
        lines += fan_out_row(results, partitioned, layout)
    return lines


def fan_out_row(results: list[dict[str, Any]], partitioned: bool, layout: str) -> list[str]:
    fan = [value(r, "notifications_per_own_job") for r in results
           if r.get("system") == "jobboard" and r.get("bench") == "cycle" and r.get("backend") == "zookeeper"
           and r.get("workers") in (16, 64) and not r.get("interleaved")
           and (r.get("processes", 1) == 1 or bool(r.get("partitions")) == partitioned)]
    found = sorted(v for v in fan if v is not None)
    if len(found) <= 2:  # only the one-process rows (W=16 and 64)
        return []
    return [(f"| notifications a process receives per job it runs, independent of the processes, {layout} | "
            f"{found[0]:.1f} to {found[-1]:.1f} (1 to 16 processes) | {met(found[-1] <= 1.2 * found[0])} |")]


def posts_row(results: list[dict[str, Any]]) -> str:
    """The issue's posting goal, with the concurrency of each side: they differ."""
    ours = find(results, "jobboard", 16)
    single = ratio(ours, find(results, TASKFLOW, 1), "posts_per_s")
    threads = ratio(ours, find(results, TASKFLOW, 16), "posts_per_s")
    if not single:
        return "| posts ≥ 30× TaskFlow single-threaded | – | – |"
    verdict = met(single >= 30) + (" (unequal concurrency)" if single >= 30 else "")
    against = f"; {threads:.0f}× TaskFlow with 16 threads" if threads else ""
    return (f"| posts ≥ 30× TaskFlow single-threaded | {single:.0f}× (jobboard {posts_in_flight(ours)} posts in "
            f"flight, TaskFlow one{against}) | {verdict} |")


def batch_and_backlog_rows(results: list[dict[str, Any]]) -> list[str]:
    many = value(bench(results, "batches"), "post_many_per_s")
    lines = [(f"| post_many ≥ 50 000 jobs/s | {f'{many:,.0f}/s' if many else '–'} | "
             f"{met(many >= 50000 if many else None)} |")]
    scaling = bench(results, "scaling") or {}
    sizes = [entry["backlog"] for entry in scaling.get("results", [])]
    flat = scaling.get("throughput_ratio_largest_to_smallest")
    if sizes and flat:
        lines.append(f"| backlog {min(sizes):,} → {max(sizes):,} flat ±20 % | {flat} (largest ÷ smallest) | "
                     f"{met(abs(float(flat) - 1) <= 0.2)} |")
    return lines


def earlier_targets(results: list[dict[str, Any]]) -> list[str]:
    ours16, tf16 = find(results, "jobboard", 16), find(results, TASKFLOW, 16)
    lines = ["", "Earlier targets:", ""]
    r = ratio(ours16, tf16)
    lines.append(f"- full cycle, 16 workers, ≥ 100× TaskFlow with 16 threads: **{r:.0f}×** in this run"
                 if r else "- full cycle vs TaskFlow at 16: not measured")
    r = ratio(ours16, find(results, CEILING, 16))
    lines.append(f"- ≥ 60 % of the raw-aiozk ceiling at the same concurrency (16): **{100 * r:.0f} %**" if r else
                 "- ceiling: not measured")
    single, tf1 = ratio(ours16, find(results, TASKFLOW, 1), "posts_per_s"), find(results, TASKFLOW, 1)
    r = ratio(ours16, tf16, "posts_per_s")
    lines.append(f"- posts ≥ 30× TaskFlow's: jobboard posting {posts_in_flight(ours16)} at a time "
                 f"(`benchmarks.cycle`) does **{single:.0f}×** TaskFlow posting from one thread, one at a time "
                 f"({value(tf1, 'posts_per_s'):,.0f}/s: the comparison the goal names, which favours jobboard), "
                 f"and **{r:.0f}×** TaskFlow posting from 16 threads" if single and r
                 else "- posts vs TaskFlow: not measured")
    kazoo = [(w, ratio(find(results, "jobboard", w), find(results, KAZOO, w))) for w in (1, 4, 16)]
    lines.append("- faster than kazoo's LockingQueue at every worker count: "
                 + ", ".join(f"W={w}: **{k:.1f}×**" if k else f"W={w}: –" for w, k in kazoo))
    scaling = bench(results, "scaling")
    if scaling:
        lines.append(f"- throughput at the largest backlog ÷ the smallest: "
                     f"**{scaling.get('throughput_ratio_largest_to_smallest')}** (target ≥ 0.8); requests "
                     "per cycle: see the scaling table")
    return lines


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, measured in this run."""
    r = ratio(find(results, "jobboard", 16), find(results, TASKFLOW, 16))
    return ["| goal (issue 12) | measured | |", "|---|---|---|", *process_rows(results),
            f"| ≥ 100× TaskFlow at W=16 | {f'{r:.0f}×' if r else '–'} | {met(r >= 100 if r else None)} |",
            posts_row(results), *batch_and_backlog_rows(results), *earlier_targets(results)]


def fleet_shapes(results: list[dict[str, Any]]) -> str:
    """``1, 4 and 16``: the process counts of the run's zookeeper:// fleet rows."""
    counts = sorted({int(r.get("processes", 1)) for r in results if r.get("bench") == "cycle"
                     and r.get("system") == "jobboard" and r.get("backend") == "zookeeper"})
    return ", ".join(map(str, counts[:-1])) + f" and {counts[-1]}" if len(counts) > 1 else str(counts[0] if counts else 1)


def plan_sentence(dag: dict[str, Any]) -> str:
    shape = (f" ({dag['layers']} layers × {dag['width']})" if "layers" in dag
             else " (`benchmarks.dag`'s default wide-and-deep shape)")
    return (f"A {value(dag, 'tasks') or 0:,.0f}-task plan{shape} on {dag['workers']} workers "
            f"(concurrency {dag['concurrency']} each): **{spread(dag, 'tasks_per_s')} tasks/s**, "
            f"posting {dag['median'].get('post_s')} s.")


def render(results: list[dict[str, Any]], facts: dict[str, str], command: str, *, recorded: list[str] | None = None,
           companion: Companion | None = None) -> str:
    """The report of one run's ``results``, with the ``recorded`` sections (``benchmarks.recorded``) before
    its analysis, which reads ``companion`` (another run) too."""
    cycles = [r for r in results if "cycles_per_s" in r.get("median", {}) and r.get("bench") == "cycle"]
    dag = next((r for r in results if r.get("bench") == "dag"), None)
    scaling = next((r for r in results if r.get("bench") == "scaling"), None)
    errors = [r for r in results if "error" in r]
    parts = [
        "# Benchmarks", "",
        (f"Produced by `{command}` (see `benchmarks/`), on {facts['date']}: {facts['cores']} cores "
        f"({facts['cpu']}), {facts['memory']}, Python {facts['python']}, ZooKeeper {facts['zookeeper']} "
        "standalone on loopback, forceSync on (as shipped). Every system ran against the same server in "
        "the same run. Medians of the repetitions, with min–max; W = concurrent claimers."
        + (f" The machine was shared: load average {facts['load_start']} at the start, {facts['load_end']} "
           "at the end (`/proc/loadavg`, 1/5/15 min)." if facts.get("load_start") else "")), "",
        "## Targets", "", *targets(results), "",
        "## Claim cycle: post N jobs, then W claimers claim → consume until empty", "", *cycle_rows(cycles), "",
        "## Ratios at the same W, same run", "", *ratio_rows(results), "",
        "## Where a cycle's CPU goes: the client and the server, per cycle", "",
        ("CPU of the benchmark process (rusage) and of the ZooKeeper server (/proc) over the consume phase, "
         "divided by the cycles; the ceiling is the raw cycle on jobboard's client fixes. With every core "
         f"busy, throughput ≈ {facts['cores']} cores ÷ (client + server µs per cycle)."), "", *cost_rows(results), "",
        f"## A fleet: the same total W in {fleet_shapes(results)} processes", "",
        ("Notifications are counted by each claiming process's client; the server's requests and "
         "notifications come from its `mntr` (packets received, and sent minus received, pings included in "
         "both) over the consume phase; CPU from rusage (clients) and /proc (server)."), "",
        *fleet_rows(results), "",
    ]
    batches = next((r for r in results if r.get("bench") == "batches"), None)
    if batches:
        median = batches.get("median", {})
        parts += ["## Batches", "", (f"{batches.get('jobs')} jobs, W={batches.get('workers')}: posts, {batches.get('workers')} in flight, "
                  f"{median.get('posts_per_s')}/s; `post_many` in batches of {batches.get('batch')}: "
                  f"**{spread(batches, 'post_many_per_s')} jobs/s**; cycles with consume then claim_next "
                  f"{median.get('cycles_per_s')}/s, with `consume_and_claim_next` {median.get('fused_cycles_per_s')}/s."),
                  ""]
    if scaling:
        parts += ["## Scaling with the backlog", "",
                  (f"{scaling.get('cycles')} claim → consume cycles by {scaling.get('workers')} claimers with the "
                  "backlog already on the board; a new board's open time and memory are measured in a fresh "
                  "process."), "", *scaling_rows(scaling), ""]
    if dag:
        parts += ["## Plans", "", plan_sentence(dag), ""]
    if redis_fleet := next((r for r in results if r.get("bench") == "redis_fleet" and "table" in r), None):
        parts += redis_fleet_section(redis_fleet)
    parts += [*(recorded or []), *reading(results, facts, companion), "", "## Commands", "", *[f"- `{' '.join(r['command'])}`" for r in results if "command" in r], ""]
    if errors:
        parts += ["## Failed benchmarks", "", *[f"- `{e.get('command')}`: {e['error'][-300:]}" for e in errors], ""]
    return "\n".join(parts)
