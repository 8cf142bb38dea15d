"""Render the benchmark results (one dict per benchmark run) as docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TASKFLOW, KAZOO, CEILING = "taskflow-zookeeper", "kazoo-lockingqueue", "aiozk-ceiling"
FIXED = "aiozk-ceiling-fixed"
"""The raw cycle on the client fixes jobboard uses (its reader, no timer per request, fastwire)."""
TASKFLOW_16_THREADS_REFERENCE = 12.9
"""TaskFlow's board with 16 worker threads, from the issue's orientation figures (jobs/s)."""


def value(result: dict[str, Any], key: str) -> float | None:
    median = result.get("median", {})
    found = median.get(key, median.get(key.replace("posts_", "post_")))
    return float(found) if isinstance(found, (int, float)) else None


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


def find(results: list[dict[str, Any]], system: str, workers: int, processes: int = 1, *,
         partitioned: bool = False) -> dict[str, Any] | None:
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


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, measured in this run."""
    ours16, tf16 = find(results, "jobboard", 16), find(results, TASKFLOW, 16)
    ceiling16, scaling = find(results, CEILING, 16), next((r for r in results if r.get("bench") == "scaling"), {})
    lines = ["| goal (issue 12) | measured | |", "|---|---|---|"]
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
        fan = [value(r, "notifications_per_own_job") for r in results
               if r.get("system") == "jobboard" and r.get("bench") == "cycle" and r.get("backend") == "zookeeper"
               and r.get("workers") in (16, 64) and not r.get("interleaved")
               and (r.get("processes", 1) == 1 or bool(r.get("partitions")) == partitioned)]
        fan_values = sorted(v for v in fan if v is not None)
        if len(fan_values) > 2:  # besides the one-process rows (W=16 and 64)
            lines.append(f"| notifications a process receives per job it runs, independent of the processes, "
                         f"{layout} | {fan_values[0]:.1f} to {fan_values[-1]:.1f} (1 to 16 processes) | "
                         f"{met(fan_values[-1] <= 1.2 * fan_values[0])} |")
    r = ratio(ours16, tf16)
    lines.append(f"| ≥ 100× TaskFlow at W=16 | {f'{r:.0f}×' if r else '–'} | {met(r >= 100 if r else None)} |")
    single = ratio(ours16, find(results, TASKFLOW, 1), "posts_per_s")
    lines.append(f"| posts ≥ 30× TaskFlow single-threaded | {f'{single:.0f}×' if single else '–'} | "
                 f"{met(single >= 30 if single else None)} |")
    batches = next((r for r in results if r.get("bench") == "batches"), None)
    many = value(batches, "post_many_per_s") if batches else None
    lines.append(f"| post_many ≥ 50 000 jobs/s | {f'{many:,.0f}/s' if many else '–'} | "
                 f"{met(many >= 50000 if many else None)} |")
    flat = scaling.get("throughput_ratio_largest_to_smallest") if scaling else None
    lines.append(f"| backlog 1k → 50k flat ±20 % | {flat if flat else '–'} (largest ÷ smallest) | "
                 f"{met(abs(float(flat) - 1) <= 0.2 if flat else None)} |")
    lines += ["", "Earlier targets:", ""]
    r = ratio(ours16, tf16)
    lines.append(f"- full cycle, 16 workers, ≥ 100× TaskFlow with 16 threads: **{r:.0f}×** in this run"
                 if r else "- full cycle vs TaskFlow at 16: not measured")
    ours16_cycles = value(ours16, "cycles_per_s") if ours16 else None
    if ours16_cycles:
        lines.append(f"  (and {ours16_cycles / TASKFLOW_16_THREADS_REFERENCE:.0f}× the issue's "
                     f"reference {TASKFLOW_16_THREADS_REFERENCE} jobs/s)")
    r = ratio(ours16, ceiling16)
    lines.append(f"- ≥ 60 % of the raw-aiozk ceiling at the same concurrency (16): **{100 * r:.0f} %**" if r else
                 "- ceiling: not measured")
    single = ratio(ours16, find(results, TASKFLOW, 1), "posts_per_s")
    r = ratio(ours16, tf16, "posts_per_s")
    lines.append(f"- posts ≥ 30× TaskFlow's: **{single:.0f}×** TaskFlow posting from one thread (the issue's "
                 f"reference, ~100/s), **{r:.0f}×** TaskFlow posting from 16 threads" if single and r
                 else "- posts vs TaskFlow: not measured")
    kazoo = [(w, ratio(find(results, "jobboard", w), find(results, KAZOO, w))) for w in (1, 4, 16)]
    lines.append("- faster than kazoo's LockingQueue at every worker count: "
                 + ", ".join(f"W={w}: **{k:.1f}×**" if k else f"W={w}: –" for w, k in kazoo))
    if scaling:
        lines.append(f"- throughput at the largest backlog ÷ the smallest: "
                     f"**{scaling.get('throughput_ratio_largest_to_smallest')}** (target ≥ 0.8); requests "
                     "per cycle: see the scaling table")
    return lines


ANALYSIS = """## Reading these numbers

- **Where a jobboard cycle goes.** A cycle is about two requests: the claim multi
  (`set_data` of the job at the version read + ephemeral `create` of the lock) and the
  consume multi (`check` + `delete` job + `delete` lock + the write marker), plus 1/16 of a
  `multiRead` that reads the next claim candidates ahead (and the batched deletion of write
  markers). The raw ceiling does two requests (ephemeral `create`, one `delete` multi) with
  pre-partitioned jobs, no watch, no marker, no attempts and no fencing. jobboard's board
  also handles four watch notifications per cycle (its live view of the board). On these 2
  cores the benchmark process and the ZooKeeper server together keep both cores busy
  (compare bench CPU s and ZK CPU s to the run's time), so every request, notification and
  byte saved is throughput gained.
- **One clock for every system.** Each consume phase is timed from its start to its last
  consume, for jobboard (`benchmarks.cycle`) as for the peers (`ConsumePhase`). Before
  2026-11-24 jobboard's phase ran until every claimer had returned: the last idle wait (up
  to 0.05 s) and the listing that told a claimer the board was empty were counted, which
  took 20-40 % off one process's 1,000-job phase and more off a fleet's (then `job_count()`
  listed 2·K directories in every idle claimer). Figures on this page from before that date
  were measured with that clock. Since the same day every process's board also waits for
  work once before the phase (on a partitioned board that joins the fleet, and each join
  makes every member re-list its partitions), and a fleet's phase starts 0.5 s after the
  last join: the phase measures a running fleet, not its start.
- **TaskFlow gets slower with more workers.** Every thread scans the whole job list from
  the oldest job. All threads race for the same first unclaimed job. And every claim
  re-lists the directory, because its lock nodes live beside the jobs. Hence the failed
  claims and the requests per job at W = 16.
- **Posts.** A jobboard post is one multi that steps the id counter (`set_data` at the
  version the board expects) and creates the job and its write marker. The unlinked posts
  made in one turn of the event loop share that multi: with 16 in flight, about 16 posts a
  request. After another board moved the counter, a post takes its id first, in two
  requests. The write marker keeps a post recognisable after a lost reply. TaskFlow posts
  with a single `create` per post (plus the watch re-listing it triggers), one round trip at
  a time per thread.
- **Job count.** TaskFlow slows down as the job count grows (it re-lists every job per claim),
  jobboard does not. The default set uses 1000 jobs per run to stay within about 5 minutes.
  The same set at 2000 jobs per system (`python -m benchmarks.run --jobs 2000`, about
  12 minutes) is in [benchmarks-2000-jobs.md](benchmarks-2000-jobs.md). There, TaskFlow
  does about 30 cycles/s at W = 16 with about 30 000 failed claims, and the ratio to it is
  correspondingly larger.
- **Several processes.** On the flat (default) layout every process keeps its own view of
  the board and receives every watch event (4 per job): the fleet table shows the
  notifications per job a process runs growing as 4 × processes, and the server's
  notifications per cycle likewise. Claimers in different processes also race for the same
  jobs (more requests per cycle). The rows marked K=16 are a board created with
  `?partitions=16`: partitions owned by processes, stealing when idle (see
  docs/backends/zookeeper.md), so a process's notifications follow its own work. That
  removes the fan-out, not the cost of more sessions each with few writes in flight: the
  raw two-request cycle without any board (`python -m benchmarks.raw_fleet`) also slows
  down with 16 processes on these 2 cores (the partitioned fleet section).
- **The raw ceilings.** "raw aiozk" is stock aiozk (a `wait_for` per read, a timer per
  request); "jobboard's client fixes" runs the same two requests on jobboard's own session
  (its reader, no timer, multis encoded by `fastwire`). jobboard's ratio to the latter is the
  board's own overhead: the claim's `set_data` (attempts, generation), the write marker,
  four notifications per cycle handled by its view, and its bookkeeping.
- **Variance.** The machine is shared; rounds interleave every system, so a slow minute
  hits all of them, and the ratios within a round are steadier than the absolute figures.
"""


def render(results: list[dict[str, Any]], facts: dict[str, str], command: str) -> str:
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
         "divided by the cycles; the ceiling is the raw cycle on jobboard's client fixes. With both cores "
         "busy, throughput ≈ 2 cores ÷ (client + server µs per cycle)."), "", *cost_rows(results), "",
        "## A fleet: the same total W in 1, 4 and 16 processes", "",
        ("Notifications are counted by each claiming process's client; the server's requests and "
         "notifications come from its `mntr` (packets received, and sent minus received, pings included in "
         "both) over the consume phase; CPU from rusage (clients) and /proc (server)."), "",
        *fleet_rows(results), "",
    ]
    batches = next((r for r in results if r.get("bench") == "batches"), None)
    if batches:
        median = batches.get("median", {})
        parts += ["## Batches", "", (f"{batches.get('jobs')} jobs, W={batches.get('workers')}: posts one at a time "
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
        parts += ["## Plans", "", (f"A 2000-task plan (40 layers × 50, fan-in 3) on {dag['workers']} workers "
                  f"(concurrency {dag['concurrency']} each): **{spread(dag, 'tasks_per_s')} tasks/s**, "
                  f"posting {dag['median'].get('post_s')} s."), ""]
    parts += [ANALYSIS, "## Commands", "", *[f"- `{' '.join(r['command'])}`" for r in results if "command" in r], ""]
    if errors:
        parts += ["## Failed benchmarks", "", *[f"- `{e.get('command')}`: {e['error'][-300:]}" for e in errors], ""]
    return "\n".join(parts)


MANUAL = "(not produced by `benchmarks.run`)"
"""Marks a section of the report written by hand (other benchmarks' figures): kept when re-rendering."""


def with_manual_sections(rendered: str, previous: str) -> str:
    """``rendered`` with the hand-written sections of ``previous`` put back before "Reading these numbers"."""
    sections = previous.split("\n## ")
    kept = [f"## {section.rstrip()}\n\n" for section in sections[1:] if MANUAL in section.split("\n", 1)[0]]
    marker = "## Reading these numbers"
    if not kept or marker not in rendered:
        return rendered
    return rendered.replace(marker, "".join(kept) + marker, 1)
