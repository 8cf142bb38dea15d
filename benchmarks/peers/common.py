"""Shared by the peer benchmarks: arguments, a unique ZooKeeper path per run, a thread-safe tally,
the consume-phase clock and the one-line JSON report."""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from benchmarks.common import Stopwatch, child_cpu_seconds, median_of, process_cpu_seconds

__all__ = ["ConsumePhase", "RequestCounter", "Stopwatch", "Tally", "count_kazoo_requests", "kazoo_run_figures",
           "make_parser", "open_client", "per_job", "report", "request_mix", "run_threads", "unique_path"]


def make_parser(description: str) -> argparse.ArgumentParser:
    """The options every peer benchmark takes; a script may add its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--hosts", default="127.0.0.1:2181", help="ZooKeeper host:port list (loopback only)")
    parser.add_argument("--jobs", type=int, default=500, help="jobs per run")
    parser.add_argument("--workers", type=int, default=4, help="concurrent claimers")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the report gives their median")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds before a run's consume phase gives up")
    parser.add_argument("--zk-pid", type=int, default=None, help="the ZooKeeper server's pid, to report its CPU")
    return parser


def unique_path(system: str) -> str:
    """A fresh top-level znode path for one run (deleted by the run afterwards)."""
    return f"/bench-peers-{system}-{uuid.uuid4().hex[:12]}"


def per_job(count: float, jobs: int) -> float:
    return round(count / max(jobs, 1), 2)


@dataclass
class Tally:
    """What the claimers did; safe to update from many threads."""

    done: int = 0
    failed_claims: int = 0
    last_done_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def consumed(self) -> None:
        with self._lock:
            self.done += 1
            self.last_done_at = time.perf_counter()

    def lost_race(self) -> None:
        with self._lock:
            self.failed_claims += 1


class ConsumePhase:
    """Wall clock and CPU of the consume phase: from just before the first claim to the last consume."""

    def __init__(self, zk_pid: int | None = None) -> None:
        self.zk_pid = zk_pid
        self.started = time.perf_counter()
        self.cpu_started = process_cpu_seconds()
        self.zk_cpu_started = child_cpu_seconds(zk_pid)
        self.cpu_s = self.zk_cpu_s = 0.0

    def stop(self) -> None:
        self.cpu_s = process_cpu_seconds() - self.cpu_started
        self.zk_cpu_s = child_cpu_seconds(self.zk_pid) - self.zk_cpu_started

    def figures(self, tally: Tally) -> dict[str, Any]:
        seconds = max(tally.last_done_at - self.started, 1e-9)
        return {"cycles": tally.done, "cycles_per_s": round(tally.done / seconds, 1) if tally.done else 0.0,
                "failed_claims": tally.failed_claims, "cpu_s": round(self.cpu_s, 3),
                **({"zk_cpu_s": round(self.zk_cpu_s, 3)} if self.zk_pid else {})}


class RequestCounter:
    """ZooKeeper requests by kind; safe to update from many threads."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def take(self) -> Counter[str]:
        """The counts so far, and start again from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts


def count_kazoo_requests(client: Any, counter: RequestCounter) -> None:
    """Count every request a kazoo client queues (all its calls, retries and recipes go through ``_call``;
    a multi counts once; pings are not counted)."""
    original = client._call

    def call(request: Any, async_object: Any) -> Any:
        counter.add(type(request).__name__)
        return original(request, async_object)

    client._call = call


def request_mix(counts: Counter[str], jobs: int) -> dict[str, float]:
    """ZooKeeper requests of each kind per job."""
    return {kind: per_job(count, jobs) for kind, count in counts.most_common()}


def kazoo_run_figures(posts_per_s: float, phase: dict[str, Any], requests: Counter[str],
                      post_requests: Counter[str], jobs: int, left: int) -> dict[str, Any]:
    """One run's figures for a kazoo peer: posts per second, the consume ``phase``'s figures, the requests of the
    consume phase per consumed job (and their mix by kind), those of posting per posted job, and the jobs left."""
    return {"post_per_s": round(posts_per_s, 1), **phase,
            "zk_requests_per_job": per_job(sum(requests.values()), phase["cycles"]),
            "post_requests_per_job": per_job(sum(post_requests.values()), jobs),
            "zk_request_mix": request_mix(requests, phase["cycles"]), "left": left}


def run_threads(workers: list[threading.Thread], timeout: float) -> int:
    """Start the threads and wait for them at most ``timeout`` seconds in all; returns how many are still
    running (they must be daemon threads that end by themselves at their deadline)."""
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    return sum(worker.is_alive() for worker in workers)


def report(bench: str, system: str, args: argparse.Namespace, runs: list[dict[str, Any]],
           **extra: Any) -> dict[str, Any]:
    """Print the one JSON line and return it."""
    line = {"bench": bench, "system": system, "jobs": args.jobs, "workers": args.workers,
            "repeat": args.repeat, **extra, "runs": runs, "median": median_of(runs)}
    print(json.dumps(line), flush=True)
    return line


def open_client(stack: ExitStack, hosts: str, counter: RequestCounter) -> Any:
    """A started, counted kazoo client, stopped by ``stack``."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    count_kazoo_requests(client, counter)
    client.start(timeout=10.0)
    stack.callback(client.close)
    stack.callback(client.stop)
    return client
