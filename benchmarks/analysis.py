"""The report's "Reading these numbers": every figure in it is computed from the run's own results.

A sentence whose figures are missing from the results is left out, so that no figure from an
earlier run is carried into a new report.
"""

from __future__ import annotations

from typing import Any

from benchmarks.lookup import CEILING, FIXED, TASKFLOW, find, ratio, span, value

Results = list[dict[str, Any]]

POST_CONCURRENCY_BEFORE_RECORDED = 64
"""``benchmarks.cycle``'s posts in flight for results written before it recorded them in its JSON
(``post_concurrency``): ``POST_CONCURRENCY`` has been 64 since the benchmark's first commit, 2a19c1d."""

CLOCK_CHANGE = "2026-11-24 07:39"
"""When ``benchmarks.cycle`` began timing its consume phase to the last consume (commit fe89fe8, UTC)."""


def posts_in_flight(result: dict[str, Any] | None) -> int:
    """How many posts ``benchmarks.cycle`` kept in flight in ``result``'s posting phase."""
    return int((result or {}).get("post_concurrency", POST_CONCURRENCY_BEFORE_RECORDED))


def cycle_cost(results: Results, cores: str) -> str | None:
    ours, ceiling = find(results, "jobboard", 16), find(results, FIXED, 16) or find(results, CEILING, 16)
    requests, raw = value(ours, "zk_requests_per_cycle"), value(ceiling, "zk_requests_per_job")
    notifications, cycles = value(ours, "notifications_per_own_job"), value(ours, "cycles_per_s")
    client, server = value(ours, "cpu_s"), value(ours, "zk_cpu_s")
    if None in (requests, raw, notifications, cycles, client, server) or ours is None:
        return None
    assert requests and raw and notifications and cycles and client and server
    phase = float(ours.get("jobs", 0)) / cycles
    busy = (client + server) / phase if phase else 0.0
    verdict = f"{busy:.1f} of the {cores} cores busy on average, so " + (
        "every request, notification and byte saved is throughput gained" if busy >= 0.75 * float(cores or 2)
        else "part of a cycle is spent waiting, not computing")
    return (f"- **Where a jobboard cycle goes.** At W = 16 jobboard sent {requests:.2f} requests per cycle: the "
            "claim multi (`set_data` of the job at the version read + ephemeral `create` of the lock) and the "
            "consume multi (`check` + `delete` job + `delete` lock + the write marker), plus its share of a "
            "`multiRead` that reads the next claim candidates ahead (and the batched deletion of write "
            f"markers). The raw ceiling sent {raw:.2f} (ephemeral `create`, one `delete` multi) with "
            "pre-partitioned jobs, no watch, no marker, no attempts and no fencing. jobboard's board also "
            f"handled {notifications:.1f} watch notifications per cycle (its live view of the board). The "
            f"benchmark process and the ZooKeeper server used {client:.2f} + {server:.2f} CPU s over a consume "
            f"phase of about {phase:.2f} s: {verdict}.")


CLOCK = ("- **One clock for every system.** Each consume phase is timed from its start to its last consume, "
         "for jobboard (`benchmarks.cycle`) as for the peers (`ConsumePhase`). Every process's board waits for "
         "work once before the phase (on a partitioned board that joins the fleet, and each join makes every "
         "member re-list its partitions), and a fleet's phase starts `JOIN_SETTLE` after the last join: the "
         f"phase measures a running fleet, not its start. Until {CLOCK_CHANGE} UTC (fe89fe8) jobboard's phase "
         "ran until every claimer had returned, counting the last idle wait and the listing that told a "
         "claimer the board was empty; the recorded runs timed so say it.")


def taskflow(results: Results) -> str | None:
    one, many = find(results, TASKFLOW, 1), find(results, TASKFLOW, 16)
    figures = [value(r, key) for key in ("cycles_per_s", "zk_requests_per_job", "failed_claims") for r in (one, many)]
    if None in figures:
        return None
    c1, c16, r1, r16, f1, f16 = (float(f or 0) for f in figures)
    trend = "gets slower" if c16 < c1 else "does not get slower"
    return (f"- **TaskFlow {trend} with more workers.** From one thread to 16 it went from {c1:,.1f} to "
            f"{c16:,.1f} cycles/s, from {r1:.2f} to {r16:.2f} ZooKeeper requests per job and from {f1:,.0f} to "
            f"{f16:,.0f} failed claims. Every thread scans the whole job list from the oldest job, all threads "
            "race for the same first unclaimed job, and every claim re-lists the directory, because its lock "
            "nodes live beside the jobs.")


def posts(results: Results) -> str | None:
    ours, one, many = find(results, "jobboard", 16), find(results, TASKFLOW, 1), find(results, TASKFLOW, 16)
    rates = [value(r, "posts_per_s") for r in (ours, one, many)]
    requests = [value(r, "post_requests_per_job") for r in (one, many)]
    if None in rates or None in requests:
        return None
    mine, single, threads = (float(r or 0) for r in rates)
    return ("- **Posts.** A jobboard post is one multi that steps the id counter (`set_data` at the version the "
            "board expects) and creates the job and its write marker; the unlinked posts made in one turn of "
            "the event loop share that multi. After another board moved the counter, a post takes its id first. "
            "The write marker keeps a post recognisable after a lost reply. TaskFlow posts with a `create` per "
            "post (plus the watch re-listing it triggers), one round trip at a time per thread: "
            f"{requests[0]:.2f} requests per post from one thread, {requests[1]:.2f} from 16. The posting rates "
            f"are not like for like: jobboard's {mine:,.0f}/s had {posts_in_flight(ours)} posts in flight "
            f"(`benchmarks.cycle`), TaskFlow's {single:,.0f}/s one (one thread) and {threads:,.0f}/s sixteen "
            f"(16 threads).")


def minutes(results: Results) -> float:
    return sum(float(r.get("seconds", 0)) for r in results) / 60


def job_count(results: Results, companion: tuple[dict[str, Any], Results] | None) -> str | None:
    here, jobs = find(results, TASKFLOW, 16), next((r.get("jobs") for r in results if r.get("bench") == "cycle"), None)
    if companion is None or here is None or jobs is None:
        return None
    header, other = companion
    there, ours_there = find(other, TASKFLOW, 16), find(other, "jobboard", 16)
    cycles, failed = value(there, "cycles_per_s"), value(there, "failed_claims")
    if there is None or cycles is None or failed is None:
        return None
    trend = "slower" if cycles < (value(here, "cycles_per_s") or 0) else "not slower"
    return (f"- **Job count.** This set posts {jobs:,} jobs per run (its benchmark processes took "
            f"{minutes(results):.0f} minutes). The same set at {there.get('jobs', 0):,} jobs per system "
            f"(`{header.get('command')}`, {minutes(other):.0f} minutes, on the tree of "
            f"{header.get('facts', {}).get('date')}) is in [benchmarks-2000-jobs.md](benchmarks-2000-jobs.md). "
            f"There, TaskFlow at W = 16 was {trend}: {cycles:,.1f} cycles/s with {failed:,.0f} failed claims "
            f"(here {value(here, 'cycles_per_s'):,.1f} with {value(here, 'failed_claims'):,.0f}): it re-lists "
            "every job per claim. jobboard did "
            f"{ratio(ours_there, there) or 0:.0f}× TaskFlow there, {ratio(find(results, 'jobboard', 16), here) or 0:.0f}× here.")


def fleet_figures(results: Results, processes: int, key: str, *, partitioned: bool = False) -> float | None:
    return value(find(results, "jobboard", 16, processes, partitioned=partitioned), key)


def processes(results: Results) -> str | None:
    own = [fleet_figures(results, p, "notifications_per_own_job") for p in (1, 4, 16)]
    sent = [fleet_figures(results, p, "server_notifications_per_cycle") for p in (1, 4, 16)]
    requests = [fleet_figures(results, p, "server_requests_per_cycle") for p in (1, 16)]
    split = [fleet_figures(results, p, "notifications_per_own_job", partitioned=True) for p in (4, 16)]
    partitions = next((r["partitions"] for r in results if r.get("partitions")), None)
    fleet = ratio(find(results, "jobboard", 16, 16, partitioned=True), find(results, "jobboard", 16))
    if None in own + sent + requests + split or not partitions or fleet is None:
        return None
    return ("- **Several processes.** On the flat (default) layout every process keeps its own view of the "
            "board and receives every watch event: at W = 16 in total, a process received "
            f"{own[0]:.1f} notifications per job it ran alone, {own[1]:.1f} with 4 processes and {own[2]:.1f} with "
            f"16, and the server sent {sent[0]:.1f}, {sent[1]:.1f} and {sent[2]:.1f} per cycle. Claimers in "
            f"different processes also race for the same jobs: {requests[0]:.2f} server requests per cycle with "
            f"one process, {requests[1]:.2f} with 16. The rows marked K={partitions} are a board created with "
            f"`?partitions={partitions}`: partitions owned by processes, stealing when idle (see "
            "docs/backends/zookeeper.md), so a process's notifications follow its own work "
            f"({split[0]:.1f} and {split[1]:.1f} per job it ran with 4 and 16 processes). That removes the "
            "fan-out, not the cost of more sessions each with few writes in flight: partitioned, 16 processes "
            f"did {fleet:.2f}× the cycles/s of one process; the raw two-request cycle without any board "
            "(`python -m benchmarks.raw_fleet`, in the partitioned fleet section) also slows down with 16 "
            "processes.")


def ceilings(results: Results) -> str | None:
    shares = [ratio(find(results, "jobboard", w), find(results, FIXED, w)) for w in (1, 4, 16, 64)]
    notifications = value(find(results, "jobboard", 16), "notifications_per_own_job")
    found = [s for s in shares if s is not None]
    if not found or notifications is None:
        return None
    return ("- **The raw ceilings.** \"raw aiozk\" is stock aiozk (a `wait_for` per read, a timer per request); "
            "\"jobboard's client fixes\" runs the same two requests on jobboard's own session (its reader, no "
            "timer, multis encoded by `fastwire`). jobboard's share of the latter "
            f"({span([100 * s for s in found], '.0f', ' %')} from W = 1 to 64 in this run) is the board's own "
            "overhead: the claim's `set_data` (attempts, generation), the write marker, "
            f"{notifications:.1f} notifications per cycle handled by its view, and its bookkeeping.")


VARIANCE = ("- **Variance.** The machine is shared; rounds interleave every system, so a slow minute hits all of "
            "them, and the ratios within a round are steadier than the absolute figures.")


def reading(results: Results, facts: dict[str, str],
            companion: tuple[dict[str, Any], Results] | None = None) -> list[str]:
    """The "Reading these numbers" section of a report of ``results`` (``companion``: the 2000-job run)."""
    found = [cycle_cost(results, facts.get("cores", "2")), CLOCK, taskflow(results), posts(results),
             job_count(results, companion), processes(results), ceilings(results), VARIANCE]
    return ["## Reading these numbers", "", *(line for line in found if line)]
