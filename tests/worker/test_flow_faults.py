"""Flow control under faults, with real worker processes (issue 27's checks, short): groups with limits 1, 2
and 5 and a sequence, 240 jobs on 4 `Worker` processes, SIGKILLs and a SIGSTOP past the session timeout.
The handlers record their starts and ends under a file lock: the jobs of a group running at once never
exceed its limit; a killed worker's claims (its permits) are back within the session timeout + 1 s; every
job is consumed (none left, none trashed); the sequence started in posting order. And a rate of 20/s on 4
processes: no 0.75-s window holds more than 20 starts (a start comes after its grant by a dispatch that a
loaded machine stretches), and the mean rate is at least 15/s. ``JOBBOARD_FLOW_RATE_JOBS=600`` makes it the issue's 30-s run.

Run on the backends with flow control that processes share: sqlite:// (no server needed) and zookeeper://
(with the ZooKeeper of ``python -m tests.support.zkserver run``). The seed is printed;
``JOBBOARD_FLOW_SEED`` replays it.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401 (the redis-spread board's cluster)
from tests.support.processes import sqlite_writable

pytestmark = pytest.mark.timeout(150)

WORKER = """
import fcntl, os, random, sys, time, anyio
from jobboard import Worker, WorkerConfig, open_board

url, log, lock, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


def record(line):
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        with open(log, "a") as out:
            out.write(line + "\\n")


async def handler(ctx):
    job = ctx.job
    record(f"start {os.getpid()} {job.id} {job.group} {job.details.get('n', -1)} {time.monotonic()}")
    try:
        await anyio.sleep(random.uniform(pause / 2, pause))
    finally:
        record(f"end {os.getpid()} {job.id} {job.group} -1 {time.monotonic()}")


def bracketed(backend):
    # each grant logged with the clock before and after the call that made it: the backend reads its own
    # clock in between, whenever the loop gets round to the reply
    for op in ("claim", "claim_next", "consume_and_claim_next", "claim_many"):
        call = getattr(backend, op, None)

        async def granting(*args, _call=call, **kwargs):
            before = time.monotonic()
            got = await _call(*args, **kwargs)
            after = time.monotonic()
            for claim in got if isinstance(got, list) else [got]:
                if claim is not None:
                    record(f"grant {os.getpid()} {claim.job.id} {claim.generation} {before} {after}")
            return got

        if call is not None:
            setattr(backend, op, granting)


async def main():
    async with open_board(url) as board:
        if len(sys.argv) > 5:
            bracketed(board.backend)
        await Worker(board, handler, WorkerConfig(owner=f"w-{os.getpid()}", concurrency=6,
                                                   idle_backoff_max=1.0)).run(handle_signals=True)

anyio.run(main)
"""

SESSION_TIMEOUT = {"sqlite": 1.0, "zookeeper": 2.0, "postgresql": 1.0, "redis": 1.0, "redis-spread": 1.0}
"""Seconds after which a stopped worker's claims are taken from it (the fastest each backend allows here)."""
LIMITS = {"k1": 1, "k2": 2, "k5": 5, "seq": 1}


class Fleet:
    """Worker processes on one board, their shared log, and the faults done to them (logged too)."""

    def __init__(self, url: str, folder: Path, pause: float, *, grants: bool = False) -> None:
        self.url, self.pause, self.grants = url, pause, grants
        self.log, self.lock = folder / "events.log", folder / "events.lock"
        self.log.touch()
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", WORKER, self.url, str(self.log), str(self.lock),
                                 str(self.pause), *(["grants"] if self.grants else [])], stdout=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def record(self, line: str) -> None:
        import fcntl

        with open(self.lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            with open(self.log, "a") as out:
                out.write(line + "\n")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGSTOP ``proc`` while holding the log's lock: stopped inside its ``record`` (the lock held), it would
        block every recorder, this test's event loop too, so that no SIGCONT ever came (seen on redis://). On
        sqlite://, outside a write transaction of its own (:meth:`_writable`)."""
        import fcntl

        with open(self.lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            for _ in range(100):
                proc.send_signal(signal.SIGSTOP)
                os.waitpid(proc.pid, os.WUNTRACED)  # stopped (at most waiting for the lock) before it is released
                if self._writable():
                    break
                proc.send_signal(signal.SIGCONT)
                time.sleep(0.02)
            else:
                raise AssertionError(f"worker {proc.pid} was stopped inside a write transaction 100 times")
        self.record(f"stopped {proc.pid}")

    def _writable(self) -> bool:
        """Whether a writer can write the board now (:func:`sqlite_writable`; not what this test is about: the CI
        run of e174c44 stopped one inside a transaction, its claims still held 2 s past its session timeout,
        every upkeep 'database is locked'). The others' transactions are short: 0.2 s of busy wait outlasts them."""
        return not self.url.startswith("sqlite://") or \
            sqlite_writable(self.url.removeprefix("sqlite://").split("?", 1)[0], busy_for=0.2)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``proc`` and log it while holding the log's lock: no other process logs a start between its
        death (a backend may give its permits back at once) and the line that ends the count of its handlers."""
        import fcntl

        with open(self.lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            proc.kill()
            proc.wait()
            with open(self.log, "a") as out:
                out.write(f"killed {proc.pid}\n")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=30)

    def events(self) -> list[list[str]]:
        return [line.split() for line in self.log.read_text().splitlines() if line]


async def claims_of(board: JobBoard, owner: str) -> int:
    return len([item async for item in board.listing() if item.owner == owner])


async def permits_back_after(board: JobBoard, owner: str) -> float:
    """Seconds until no job on the board is claimed by ``owner``."""
    began = time.monotonic()
    while await claims_of(board, owner):  # noqa: ASYNC110 (other processes' claims: no event here)
        await anyio.sleep(0.05)
    return time.monotonic() - began


def check_history(events: list[list[str]], posted_order: list[str],
                  session_timeout: float) -> tuple[dict[str, int], int, int]:
    """Replay the log: the most jobs of each group running at once (a killed or stopped worker's handlers
    stop counting when the fault is logged), how many starts there were, and how many were stale. Asserts
    the limits and the sequence's order of first starts.

    A stale start: a process stopped past its session may, once continued, start the handler of a claim
    it lost while stopped (the claim's reply was waiting in its socket). The board granted that permit
    again meanwhile; the worker cancels the stale handler as soon as its claim watch says so, and its
    settle is refused. Such a start (by the continued process, within a session timeout, of a job another
    process started after the stop) is counted apart, not as running."""
    stopped_at = {event[1]: index for index, event in enumerate(events) if event[0] == "stopped"}
    taken_over = {(pid, event[2]) for pid, at in stopped_at.items() for event in events[at:]
                  if event[0] == "start" and event[1] != pid}
    """(stopped process, job another process started after the stop): its claim of that job was lost."""
    continued = {event[1]: float(event[2]) for event in events if event[0] == "continued"}
    """When the test sent each SIGCONT; its line may come after the continued process's first lines."""
    running: dict[str, set[tuple[str, str]]] = defaultdict(set)
    most: dict[str, int] = defaultdict(int)
    first_starts: list[str] = []
    starts = stale = 0
    for index, (kind, pid, *rest) in enumerate(events):
        if kind == "continued":
            continue
        if kind == "start":
            job, group = rest[0], rest[1]
            starts += 1
            if pid in continued and index > stopped_at[pid] and float(rest[3]) < continued[pid] + session_timeout \
                    and (pid, job) in taken_over:
                stale += 1
                continue
            if group == "seq" and job not in first_starts:
                first_starts.append(job)
            if group in LIMITS:
                running[group].add((pid, job))
                most[group] = max(most[group], len(running[group]))
                assert len(running[group]) <= LIMITS[group], (group, sorted(running[group]), events[:index + 1][-40:])
        elif kind == "end":
            running[rest[1]].discard((pid, rest[0]))
        else:  # killed / stopped: its handlers run no more from now on
            for group, entries in running.items():
                running[group] = {entry for entry in entries if entry[0] != pid}
    assert first_starts == posted_order
    return dict(most), starts, stale


@pytest.fixture(params=("sqlite", "zookeeper", "postgresql", "redis", "redis-spread"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, float]:
    """A fresh board's URL on each backend, and its session timeout."""
    timeout, name = SESSION_TIMEOUT[request.param], f"flow-{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/jobs.db?board={name}&session_timeout={timeout}&reap_interval=0.1", timeout
    if request.param == "postgresql":
        from tests.support.pgserver import shared_url
        return f"{shared_url()}?board={name}&session_timeout={timeout}&reap_interval=0.2", timeout
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}/0/{name}?session_timeout={timeout}", timeout
    if request.param == "redis-spread":  # the spread board (tests/backends/redis/test_spread.py's cluster)
        seeds = request.getfixturevalue("cluster_seeds")
        return f"redis://{seeds}/0/{name}?cluster=1&partitions=3&session_timeout={timeout}", timeout
    return f"zookeeper://{request.getfixturevalue('zk_hosts')}/flow-faults/{name}?session_timeout={timeout}", timeout


async def test_limits_hold_through_kills_and_a_stop_past_the_session_timeout(
    tmp_path: Path, backend: tuple[str, float],
) -> None:
    seed = int(os.environ.get("JOBBOARD_FLOW_SEED", random.randrange(2**32)))
    print(f"JOBBOARD_FLOW_SEED={seed}")
    rng = random.Random(seed)
    url, session_timeout = backend
    fleet = Fleet(url, tmp_path, pause=0.06)
    async with open_board(url) as board:
        if not board.backend.flow_control:
            pytest.skip("this backend has no flow control yet")
        for group, limit in LIMITS.items():
            if group == "seq":
                await board.set_limit(group, sequence=True)
            else:
                await board.set_limit(group, concurrency=limit)
        jobs = [NewJob("work", {"n": n}, group=group) for n in range(60) for group in ("k1", "k2", "k5", "seq")]
        posted = await board.post_many(jobs[:120]) + await board.post_many(jobs[120:])
        sequence = [job.id for job in posted if job.group == "seq"]
        returns: list[float] = []
        try:
            for _ in range(4):
                fleet.start()
            with anyio.fail_after(120):
                for step in range(4):
                    await anyio.sleep(rng.uniform(0.7, 1.4))
                    victim = rng.choice([proc for proc in fleet.procs if proc.poll() is None])
                    if step == 2:  # stopped past its session: its claims are given to others meanwhile
                        fleet.stop(victim)
                        await anyio.sleep(session_timeout + 1.0)
                        assert await claims_of(board, f"w-{victim.pid}") == 0
                        victim.send_signal(signal.SIGCONT)
                        fleet.record(f"continued {victim.pid} {time.monotonic()}")
                        continue
                    fleet.kill(victim)
                    returns.append(await permits_back_after(board, f"w-{victim.pid}"))
                    fleet.start()
                while await board.job_count():  # noqa: ASYNC110 (the workers are other processes)
                    await anyio.sleep(0.1)
        finally:
            fleet.stop_all()
        assert [item async for item in board.trashed()] == []
        most, starts, stale = check_history(fleet.events(), sequence, session_timeout)
    print(f"permits back after a kill: {[round(seconds, 2) for seconds in returns]} s; stale starts: {stale}")
    # the target is the session timeout + 1 s (sqlite:// measured 0.01-0.25 s, zookeeper:// 2.2-2.6 s
    # on a quiet machine); the bound leaves a loaded machine's ZooKeeper server another timeout
    assert max(returns) <= 2 * session_timeout + 1.0, returns
    assert most["k5"] >= 2 and all(most[group] <= limit for group, limit in LIMITS.items()), most  # none passed
    assert starts >= len(posted)


def least_span(grants: list[tuple[float, float]], count: int) -> float:
    """The least time ``count`` of the bracketed grants may have come apart: over every ``count`` of them, the
    latest ``after`` less the earliest ``before`` (each grant came inside its (before, after) bracket)."""
    spans = []
    for first, (before, after) in enumerate(grants):
        later = sorted(other[1] for index, other in enumerate(grants) if index != first and other[0] >= before)
        if len(later) >= count - 1:
            spans.append(max(after, later[count - 2]) - before)
    return min(spans)


async def test_a_rate_holds_across_processes(tmp_path: Path, backend: tuple[str, float]) -> None:
    url, _ = backend
    fleet = Fleet(url, tmp_path, pause=0.01, grants=True)
    jobs, rate = int(os.environ.get("JOBBOARD_FLOW_RATE_JOBS", "70")), 20  # 600: the 30-s run
    async with open_board(url) as board:
        if not board.backend.flow_control:
            pytest.skip("this backend has no flow control yet")
        await board.set_limit("api", rate=(rate, 1.0))
        await board.post_many([NewJob("call", group="api") for _ in range(jobs)])
        try:
            for _ in range(4):
                fleet.start()
            with anyio.fail_after(60 + jobs / rate):
                while await board.job_count():  # noqa: ASYNC110 (the workers are other processes)
                    await anyio.sleep(0.1)
        finally:
            fleet.stop_all()
    events = fleet.events()
    starts = sorted(float(event[5]) for event in events if event[0] == "start")
    brackets: dict[tuple[str, str], tuple[float, float]] = {}
    for _, _, job, generation, before, after in (event for event in events if event[0] == "grant"):
        seen = brackets.get((job, generation), (-math.inf, math.inf))  # an op inside another: both hold it
        brackets[job, generation] = (max(seen[0], float(before)), min(seen[1], float(after)))
    grants = sorted(brackets.values())
    assert len(starts) == jobs and len(grants) == jobs, (len(starts), len(grants))
    span, first_to_last = least_span(grants, rate + 1), grants[-1][1] - grants[0][0]
    handlers = min(later - earlier for earlier, later in zip(starts, starts[rate:], strict=False))
    print(f"{rate + 1} grants never within less than {span:.3f} s ({rate + 1} handler starts: {handlers:.3f} s); "
          f"mean rate {(jobs - 1) / first_to_last:.1f}/s")
    # Grants, each bracketed by the clock before and after its call: a handler starts after its grant by a
    # dispatch that a loaded machine stretches (handler starts were once 0.81 s apart at load 7-12 for grants
    # a full second apart). The backend's clock: a server's, to the millisecond. A token bucket (2 x 20 in a
    # second) fails it, and so does a worker polling the rate every idle_backoff_max (1 s) (the mean).
    assert span >= 1.0 - 0.002, grants
    assert (jobs - 1) / first_to_last >= 0.75 * rate  # 16-24/s measured
