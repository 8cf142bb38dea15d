"""Workers under real faults on ZooKeeper: SIGKILLed processes, expired sessions, outages."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest

from jobboard import EventKind, JobBoard, JobState, open_board
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import JobContext
from tests.support.processes import spawn_ready
from tests.support.tcpproxy import TcpProxy
from tests.support.workers import blocking_handler, running

pytestmark = pytest.mark.timeout(150)

JOBS = 500
PROCESSES = 4
KILLS = 5
CONCURRENCY = 2
"""Jobs in flight per worker process."""
SCHEDULES = 2
"""Runs tried until one's kills all come while the board still has work."""
WORKER = "tests.support.worker_proc"


async def spawn_worker(url: str, effects: Path) -> asyncio.subprocess.Process:
    return await spawn_ready(WORKER, url, str(effects), str(CONCURRENCY))


async def spawn_standby(url: str, effects: Path) -> asyncio.subprocess.Process:
    """A replacement for worker 0, started and imported but not yet on the board (see :func:`start`)."""
    child = await asyncio.create_subprocess_exec(sys.executable, "-m", WORKER, url, str(effects), str(CONCURRENCY),
                                                 "standby", stdin=asyncio.subprocess.PIPE,
                                                 stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None and (await child.stdout.readline()).strip() == b"standby"
    return child


async def start(standby: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
    """Let a standby open the board and claim: a restart without an interpreter's start-up."""
    assert standby.stdin is not None and standby.stdout is not None
    standby.stdin.write(b"go\n")
    await standby.stdin.drain()
    assert (await standby.stdout.readline()).strip() == b"ready"
    return standby


def read_effects(directory: Path) -> Counter[str]:
    """How many times each job's side effect ran, over every worker's log."""
    return Counter(line for log in directory.glob("w*.log") for line in log.read_text().split())


def reruns_of_the_killed(directory: Path) -> list[int]:
    """For each SIGKILLed incarnation of worker 0: how many of the jobs it began ran again elsewhere."""
    runs = {log.stem: log.read_text().split() for log in directory.glob("w*.log")}
    rerun = []
    for kill in range(KILLS):
        elsewhere = {job for name, jobs in runs.items() if name != f"w0-{kill}" for job in jobs}
        rerun.append(len(set(runs.get(f"w0-{kill}", ())) & elsewhere))
    return rerun


async def count_consumed(board: JobBoard, consumed: Counter[str], done: anyio.Event) -> None:
    async for event in board.events(maxlen=100_000):
        if event.kind is EventKind.CONSUMED and event.job_id is not None:
            consumed[event.job_id] += 1
            if len(consumed) == JOBS:
                done.set()


async def kill_mid_job(worker: asyncio.subprocess.Process, effects: Path, done: anyio.Event) -> bool:
    """SIGKILL ``worker`` once it has begun its first job (a handler runs 50-100 ms); False if the
    board drained first. ``effects`` is this worker's own log, empty until then."""
    log = anyio.Path(effects)
    while not done.is_set():
        if await log.exists() and (await log.read_text()).strip():
            worker.kill()
            await worker.wait()
            return True
        await anyio.sleep(0.005)
    return False


class KillRun(NamedTuple):
    posted: set[str]
    consumed: Counter[str]
    """Consumed events per job."""
    seconds: float
    kills: int
    consumed_at_last_kill: int
    reruns: list[int]
    """Per kill: the jobs the killed worker had begun that ran again elsewhere."""


async def kill_one_five_times(url: str, directory: Path) -> KillRun:
    """Post JOBS, run PROCESSES workers, SIGKILL worker 0 mid-job KILLS times, each time replaced by
    a standby (the replacements are started at once, so the kills come quickly, while work remains)."""
    consumed: Counter[str] = Counter()
    done = anyio.Event()
    workers: list[asyncio.subprocess.Process] = []
    standbys: list[asyncio.subprocess.Process] = []
    try:
        standbys += [await spawn_standby(url, directory / f"w0-{n}.log") for n in range(1, KILLS + 1)]
        async with open_board(url) as board, anyio.create_task_group() as group:
            group.start_soon(count_consumed, board, consumed, done)
            posted = {(await board.post("work", {"i": i})).id for i in range(JOBS)}
            started = time.monotonic()
            workers += [await spawn_worker(url, directory / f"w{n}-0.log") for n in range(PROCESSES)]
            kills = 0
            while kills < KILLS and await kill_mid_job(workers[0], directory / f"w0-{kills}.log", done):
                workers[0] = await start(standbys[kills])
                kills += 1
            at_last_kill = len(consumed)
            await done.wait()
            elapsed = time.monotonic() - started
            for child in workers:
                child.send_signal(signal.SIGTERM)
            assert [await child.wait() for child in workers] == [0] * PROCESSES  # SIGTERM: a graceful exit
            assert await board.job_count() == 0 and [t async for t in board.trashed()] == []
            group.cancel_scope.cancel()
    finally:
        for child in workers + standbys:
            if child.returncode is None:
                child.kill()
                await child.wait()
    return KillRun(posted, consumed, elapsed, kills, at_last_kill, reruns_of_the_killed(directory))


async def test_500_jobs_four_processes_one_killed_five_times(zk_hosts: str, tmp_path: Path) -> None:
    runs: list[KillRun] = []
    with anyio.fail_after(130):
        while len(runs) < SCHEDULES and (not runs or runs[-1].kills < KILLS):  # until every kill came mid-drain
            directory = tmp_path / f"run{len(runs)}"
            directory.mkdir()
            url = f"zookeeper://{zk_hosts}/processes/{uuid.uuid4().hex}?session_timeout=2"
            run = await kill_one_five_times(url, directory)
            print(f"{JOBS} jobs, {PROCESSES} worker processes, one SIGKILLed {run.kills} times (the last with "
                  f"{run.consumed_at_last_kill} consumed): {run.seconds:.1f}s, jobs re-run after each kill {run.reruns}")
            assert set(read_effects(directory)) == run.posted  # every job's side effect happened at least once
            assert set(run.consumed) == run.posted and set(run.consumed.values()) == {1}  # consumed exactly once
            runs.append(run)
    last = runs[-1]
    assert last.kills == KILLS and min(last.reruns) >= 1, (last.kills, last.reruns)  # each kill cut a job, run again


@asynccontextmanager
async def proxied_and_direct(
    zk_hosts: str, name: str, proxied: str, direct: str,
) -> AsyncIterator[tuple[TcpProxy, JobBoard, JobBoard]]:
    """A fresh proxy and two boards on a fresh root ``/<name>/<hex>``: one through the proxy (URL query
    ``proxied``), one straight to ZooKeeper (``direct``); all closed on exit."""
    host, port = zk_hosts.rsplit(":", 1)
    root = f"/{name}/{uuid.uuid4().hex}"
    async with TcpProxy(host, int(port)) as proxy, \
            open_board(f"zookeeper://{proxy.hosts}{root}{proxied}") as behind, \
            open_board(f"zookeeper://{zk_hosts}{root}{direct}") as straight:
        yield proxy, behind, straight


async def test_session_expiry_cancels_the_handler_and_another_worker_finishes(zk_hosts: str) -> None:
    cancelled_at: list[float] = []
    running = anyio.Event()

    async def long_job(ctx: JobContext) -> str:
        if ctx.attempt > 1:
            return "finished by the survivor"
        running.set()
        try:
            await anyio.sleep(60)
        finally:
            cancelled_at.append(time.monotonic())
        return "never"

    with anyio.fail_after(60):
        async with proxied_and_direct(zk_hosts, "expiry", "?session_timeout=2", "?session_timeout=2") as (
                proxy, doomed, survivor):
            events = doomed.events()
            job = await survivor.post("long", keep_result=True)
            first = Worker(doomed, long_job, WorkerConfig(owner="doomed"))
            async with anyio.create_task_group() as group:
                group.start_soon(first.run)
                await running.wait()
                proxy.pause()
                async for event in events:
                    if event.kind is EventKind.SESSION_EXPIRED:
                        detected_at = time.monotonic()
                        break
                second = Worker(survivor, long_job, WorkerConfig(owner="survivor"))
                group.start_soon(second.run)
                outcome = await survivor.wait_for_completion(job)
                first.stop(now=True)
                second.stop()
                proxy.resume()
    delay = cancelled_at[0] - detected_at
    print(f"handler cancelled {delay * 1000:.0f} ms after the session loss was detected")
    assert delay <= 2.0
    assert outcome.result == "finished by the survivor"
    assert first.stats.lost == 1 and first.stats.consumed == 0


async def test_worker_rides_out_an_outage(zk_hosts: str) -> None:
    done: list[str] = []
    first_done = anyio.Event()

    async def slow(ctx: JobContext) -> None:
        await anyio.sleep(0.3)
        done.append(ctx.job.id)
        first_done.set()

    with anyio.fail_after(60):
        async with proxied_and_direct(zk_hosts, "outage", "?session_timeout=10&connect_timeout=0.5", "") as (
                proxy, board, producer):
            jobs = [await producer.post("slow", {"i": i}) for i in range(10)]
            async with running(board, slow, concurrency=2) as worker:
                await first_done.wait()
                proxy.pause()  # settles and claims in flight now fail for 3 s
                await anyio.sleep(3)
                proxy.resume()
                for job in jobs:
                    await producer.wait_for_completion(job)
            assert [await producer.state(job) for job in jobs] == [JobState.COMPLETE] * 10
    print(f"outage ridden out with {worker.stats.backend_errors} transient errors, {worker.stats.lost} lost")
    assert worker.stats.backend_errors > 0
    assert sorted(done) == sorted({job.id for job in jobs})


async def test_an_unsettleable_trash_does_not_wedge_the_worker(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/wedge/{uuid.uuid4().hex}?jute_maxbuffer=20000"

    async def fails_loudly(ctx: JobContext) -> None:
        raise ValueError("x" * 10_000)  # with the posting, too big a trash record for this server

    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await board.post("big", {"blob": "y" * 15_000}, max_attempts=1)
            worker = Worker(board, fails_loudly)
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                outcome = await board.wait_for_completion(job)  # trashed without its error record
                worker.stop(now=True)
            assert outcome.state is JobState.TRASHED and "ValueError: xxx" in (outcome.reason or "")


async def test_cancelling_the_worker_abandons_its_running_jobs(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/cancelled/{uuid.uuid4().hex}"
    started, slow = blocking_handler()
    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await board.post("slow")
            async with anyio.create_task_group() as group:
                group.start_soon(Worker(board, slow).run)
                await started.wait()
                group.cancel_scope.cancel()  # cancelled from outside, not stopped
            assert await board.state(job) is JobState.UNCLAIMED
            assert (await board.get(job)).attempts == 0  # given back by board.release: a stop, no failure
