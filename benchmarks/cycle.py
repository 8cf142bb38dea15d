"""Claim-cycle throughput of a jobboard board: post N jobs, then W claimers do
claim_next -> consume until all N are consumed; the phase is timed from its start to the
last consume, as the peers' benchmarks time theirs (``benchmarks.peers.common.ConsumePhase``).
Until 2026-11-24 it ran until every claimer had returned: an idle claimer's last wait (up to
0.05 s) and the board listing that told it the board was empty were counted, which took
20-40 % off a 1,000-job phase of one process and more off a fleet's.

    python -m benchmarks.cycle --url zookeeper://127.0.0.1:2181/bench --jobs 2000 --workers 16 --repeat 3
    python -m benchmarks.cycle --url memory://bench --jobs 2000 --workers 16
    python -m benchmarks.cycle --url ... --interleaved       # producers post while workers consume
    python -m benchmarks.cycle --url ... --processes 4       # W claimers split over 4 processes
    python -m benchmarks.cycle --url ... --partitions 16     # a partitioned zookeeper:// board

Prints one JSON line: per run and median, posts/s, cycles/s, claim latency
p50/p99 (ms), failed claim attempts (lost races), ZooKeeper requests per cycle,
CPU seconds of the benchmark process(es) and, with --zk-pid, of the server; the
watch notifications each claiming process receives per job of the board, and per
job it ran itself (the clients' counts);
CPU milliseconds per job in the claiming processes and in the server; and the
server's own counts per cycle from its ``mntr`` four-letter word (packets received
= requests, pings included; packets sent minus received = notifications). The
producer board is closed before the consume phase, so only claimers are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any

import anyio

from benchmarks.callgrind import counting
from benchmarks.common import Stopwatch, child_cpu_seconds, median_of, percentile, process_cpu_seconds
from jobboard import JobBoard, open_board

POST_CONCURRENCY = 64


def run_url(base: str) -> str:
    """A fresh board under ``base`` for one run."""
    if base.startswith("memory://"):
        return f"{base}-{uuid.uuid4().hex[:8]}"
    path, _, query = base.partition("?")
    return f"{path.rstrip('/')}/{uuid.uuid4().hex[:8]}" + (f"?{query}" if query else "")


def requests_sent(board: JobBoard) -> int:
    zk = getattr(getattr(board, "backend", board), "zk", None)
    return int(getattr(zk, "requests_sent", 0))


def events_received(board: JobBoard) -> int:
    zk = getattr(getattr(board, "backend", board), "zk", None)
    return int(getattr(zk, "events_received", 0))


def server_counts(hosts: str | None) -> tuple[int, int]:
    """The server's packets received and sent so far (``mntr``), or zeros without a server."""
    if not hosts:
        return 0, 0
    from tests.support.zkserver import four_letter

    try:
        reply = four_letter(int(hosts.split(",")[0].rsplit(":", 1)[1]), "mntr")
    except OSError:
        return 0, 0
    found = dict(line.split("\t", 1) for line in reply.splitlines() if "\t" in line)
    return int(found.get("zk_packets_received", 0)), int(found.get("zk_packets_sent", 0))


async def post_jobs(board: JobBoard, count: int, name: str = "bench") -> float:
    """Post ``count`` jobs, ``POST_CONCURRENCY`` at a time; returns posts per second."""
    limiter = anyio.CapacityLimiter(POST_CONCURRENCY)
    watch = Stopwatch()

    async def post(index: int) -> None:
        async with limiter:
            await board.post(name, {"i": index})

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(post, index)
    return count / watch.elapsed()


class Tally:
    """Jobs consumed so far by every claimer of the phase, and when the last was (wall clock).
    In one process a plain count; across processes ``multiprocessing.Value``s (``shared``)."""

    def __init__(self, total: int | None, shared: tuple[Any, Any] | None = None) -> None:
        self.total = total
        self._count, self._last = shared if shared is not None else (None, None)
        self._local, self.last = 0, 0.0

    @property
    def count(self) -> int:
        return int(self._count.value) if self._count is not None else self._local

    def add(self) -> None:
        now = time.time()
        if self._count is None:
            self._local, self.last = self._local + 1, now
            return
        with self._count.get_lock():
            self._count.value += 1
            self._last.value = max(self._last.value, now)

    def complete(self) -> bool:
        return self.total is not None and self.count >= self.total


JOIN_SETTLE = 0.5
"""Seconds between the last process's join and the start of a fleet's phase. Each process's board
has waited for work (``wait()``) before it is ready: on a partitioned board that joins the fleet,
and every join makes each member re-list its partitions. A fleet of workers joins once and then
runs for hours; the phase measures that running fleet, not its start (the joins' listings made
the 1,000-job phase of 16 processes about half start-up)."""

IDLE_CHECK = 20
"""Idle waits (0.05 s each) before a claimer with a ``Tally`` asks the board whether it is empty:
the phase ends when every posted job is consumed (no listing in the claim loop: ``job_count``
lists 2-3 directories, 2-3·K on a partitioned board, which is not what a worker does)."""


async def drain(board: JobBoard, owner: str, latencies: list[float], stop: anyio.Event | None = None,
                tally: Tally | None = None) -> int:
    """claim_next -> consume until every job is consumed (``tally``) or the board is empty (or
    ``stop`` is set and it is empty)."""
    done, idle = 0, 0
    tally = tally or Tally(None)
    while not tally.complete():
        started = time.perf_counter()
        claim = await board.claim_next(owner)
        latencies.append(time.perf_counter() - started)
        if claim is None:
            idle += 1
            if ((tally.total is None or idle % IDLE_CHECK == 0) and (stop is None or stop.is_set())
                    and await board.job_count() == 0):
                return done
            with anyio.move_on_after(0.05):
                await board.wait()
            continue
        idle = 0
        await board.consume(claim)
        done += 1
        tally.add()
    return done


async def consume_phase(url: str, workers: int, ready: Any = None, go: Any = None,
                        tally: Tally | None = None) -> dict[str, Any]:
    """W claimers sharing one board (one session) until ``tally`` is complete; the phase's figures
    (its seconds: from the start to the last consume).

    In a child process, ``ready`` (a queue) hears that the board is open and ``go``
    (an event) starts the claimers, so that every process is measured over the same phase.
    """
    tally = tally or Tally(None)
    latencies: list[float] = []
    async with open_board(url) as board:
        with anyio.move_on_after(5):  # join a partitioned board's fleet first (JOIN_FIRST)
            await board.wait()
        if ready is not None:
            ready.put("ready")
            await anyio.to_thread.run_sync(go.wait)
        requests_before, conflicts_before = requests_sent(board), getattr(getattr(board, "backend", board), "claim_conflicts", 0)
        events_before, steals_before = events_received(board), getattr(getattr(board, "backend", board), "steals", 0)
        watch, cpu, started = Stopwatch(), process_cpu_seconds(), time.time()
        with counting("cycles"):  # its instructions, under benchmarks.instructions (else nothing)
            async with anyio.create_task_group() as group:
                results: list[int] = []

                async def claimer(index: int) -> None:
                    results.append(await drain(board, f"c{index}", latencies, tally=tally))

                for index in range(workers):
                    group.start_soon(claimer, index)
        elapsed = watch.elapsed() if tally.total is None or not tally.last else tally.last - started
        return {"cycles": sum(results), "seconds": elapsed, "cpu_s": process_cpu_seconds() - cpu,
                "requests": requests_sent(board) - requests_before,
                "events": events_received(board) - events_before,
                "failed_claims": getattr(getattr(board, "backend", board), "claim_conflicts", 0) - conflicts_before,
                "steals": getattr(getattr(board, "backend", board), "steals", 0) - steals_before, "latencies": latencies}


def _consume_in_child(url: str, workers: int, queue: Any, go: Any, total: int, shared: tuple[Any, Any]) -> None:
    result = anyio.run(consume_phase, url, workers, queue, go, Tally(total, shared))
    result.pop("latencies")
    queue.put(result)


async def consume_in_processes(url: str, workers: int, processes: int, total: int) -> dict[str, Any]:
    """The consume phase split over ``processes`` processes of W/processes claimers each, until
    ``total`` jobs are consumed; its seconds run from the start to the last consume."""
    context = multiprocessing.get_context("spawn")
    queue, go = context.Queue(), context.Event()
    shared = (context.Value("i", 0), context.Value("d", 0.0))
    children = [context.Process(target=_consume_in_child,
                                args=(url, max(1, workers // processes), queue, go, total, shared))
                for _ in range(processes)]
    for child in children:
        child.start()
    for _ in children:  # every board is open (and sees the whole board) before the phase starts
        await anyio.to_thread.run_sync(queue.get, abandon_on_cancel=True)
    await anyio.sleep(JOIN_SETTLE)
    started = time.time()
    go.set()
    parts = [await anyio.to_thread.run_sync(queue.get, abandon_on_cancel=True) for _ in children]
    for child in children:
        await anyio.to_thread.run_sync(child.join)
    return {"cycles": sum(p["cycles"] for p in parts), "seconds": shared[1].value - started,
            "cpu_s": sum(p["cpu_s"] for p in parts), "requests": sum(p["requests"] for p in parts),
            "failed_claims": sum(p["failed_claims"] for p in parts), "latencies": [],
            "events": sum(p["events"] for p in parts), "steals": sum(p["steals"] for p in parts)}


async def one_run(args: argparse.Namespace) -> dict[str, Any]:
    url = run_url(args.url)
    zk_cpu, server = 0.0, (0, 0)
    async with AsyncExitStack() as stack:
        producer = await stack.enter_async_context(open_board(url))
        if args.interleaved:
            zk_cpu, server = child_cpu_seconds(args.zk_pid), server_counts(args.hosts)
            phase, posts_per_s = await interleaved(url, producer, args)
        else:
            with counting("posts"):  # its instructions, under benchmarks.instructions (else nothing)
                posts_per_s = await post_jobs(producer, args.jobs)
            await stack.aclose()  # only the claimers' boards watch during the consume phase
            zk_cpu, server = child_cpu_seconds(args.zk_pid), server_counts(args.hosts)
            if args.processes > 1:
                phase = await consume_in_processes(url, args.workers, args.processes, args.jobs)
            else:
                phase = await consume_phase(url, args.workers, tally=Tally(args.jobs))
    zk_cpu, after = child_cpu_seconds(args.zk_pid) - zk_cpu, server_counts(args.hosts)
    async with open_board(url) as board:
        left = await board.job_count()
    latencies = sorted(phase.pop("latencies"))
    cycles = max(phase["cycles"], 1)
    return {"posts_per_s": round(posts_per_s, 1), "cycles_per_s": round(phase["cycles"] / phase["seconds"], 1),
            "claim_p50_ms": round(1000 * percentile(latencies, 50), 2) if latencies else None,
            "claim_p99_ms": round(1000 * percentile(latencies, 99), 2) if latencies else None,
            "failed_claims": phase["failed_claims"], "steals": phase.get("steals", 0),
            "zk_requests_per_cycle": round(phase["requests"] / max(phase["cycles"], 1), 2),
            "cpu_s": round(phase["cpu_s"], 2),
            "zk_cpu_s": round(zk_cpu, 2) if args.zk_pid else None,
            "cpu_ms_per_job": round(1000 * phase["cpu_s"] / cycles, 3),
            "zk_cpu_ms_per_job": round(1000 * zk_cpu / cycles, 3) if args.zk_pid else None,
            "notifications_per_job_per_process": round(phase["events"] / cycles / args.processes, 2),
            "notifications_per_own_job": round(phase["events"] / cycles, 2),
            "server_requests_per_cycle": round((after[0] - server[0]) / cycles, 2) if args.hosts else None,
            "server_notifications_per_cycle": (round(((after[1] - server[1]) - (after[0] - server[0])) / cycles, 2)
                                               if args.hosts else None),
            "left": left}


async def interleaved(url: str, producer: JobBoard, args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    """Producers post while claimers consume; the phase ends when all are consumed."""
    latencies: list[float] = []
    stop = anyio.Event()
    done: list[int] = []
    async with open_board(url) as board:
        watch, cpu, requests = Stopwatch(), process_cpu_seconds(), requests_sent(board)

        async def produce() -> float:
            rate = await post_jobs(producer, args.jobs)
            stop.set()
            return rate

        async def claimer(index: int) -> None:
            done.append(await drain(board, f"c{index}", latencies, stop))

        rates: list[float] = []
        async with anyio.create_task_group() as group:
            for index in range(args.workers):
                group.start_soon(claimer, index)
            rates.append(await produce())
        phase = {"cycles": sum(done), "seconds": watch.elapsed(), "cpu_s": process_cpu_seconds() - cpu,
                 "requests": requests_sent(board) - requests, "latencies": latencies, "events": events_received(board),
                 "failed_claims": getattr(getattr(board, "backend", board), "claim_conflicts", 0)}
    return phase, rates[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="board URL (memory://... or zookeeper://...)")
    parser.add_argument("--hosts", default=None, help="ZooKeeper hosts, instead of --url")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--interleaved", action="store_true")
    parser.add_argument("--partitions", type=int, default=None,
                        help="zookeeper://: create each run's board with ?partitions=K")
    parser.add_argument("--zk-pid", type=int, default=None, help="the ZooKeeper server's pid, to report its CPU")
    args = parser.parse_args(argv)
    args.url = args.url or f"zookeeper://{args.hosts or '127.0.0.1:2181'}/bench/cycle"
    if args.partitions:
        args.url += ("&" if "?" in args.url else "?") + f"partitions={args.partitions}"
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    runs = [asyncio.run(one_run(args)) for _ in range(args.repeat)]
    report = {"bench": "cycle", "system": "jobboard", "backend": args.url.split(":")[0], "jobs": args.jobs,
              "workers": args.workers, "processes": args.processes, "partitions": args.partitions,
              "interleaved": args.interleaved, "post_concurrency": POST_CONCURRENCY,
              "repeat": args.repeat, "runs": runs, "median": median_of(runs)}
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
