"""SIGTERM at random moments of a worker process's start-up and shutdown: exit 0, nothing lost.

Start-up is counted from the moment the process catches SIGTERM (Python
itself must be running: before that the default action applies). Odd rounds
send a second SIGTERM at a random moment of the drain ("stop now").
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from jobboard import JobState, open_board
from jobboard.worker.conductor import Worker, WorkerConfig
from tests.support.cli_handlers import handlers

pytestmark = pytest.mark.timeout(90)

ROUNDS = 20
HANDLERS = "tests.support.cli_handlers:handlers"


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def one_round(url: str, rng: random.Random, second_signal: bool) -> tuple[int, str, float]:
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS,
                              "--concurrency", "2", "--grace-period", "5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not catches_sigterm(child.pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    delay = rng.uniform(0, 0.8)
    time.sleep(delay)
    child.send_signal(signal.SIGTERM)
    if second_signal:
        time.sleep(rng.uniform(0, 0.2))
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    return child.returncode, err, delay


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads SigCgt from /proc")
async def test_sigterm_at_random_moments_of_start_up_and_shutdown(zk_hosts: str) -> None:
    seed = int(os.environ.get("JOBBOARD_SIGNAL_SEED", "1123"))
    rng = random.Random(seed)
    url = f"zookeeper://{zk_hosts}/signals/{uuid.uuid4().hex}?session_timeout=4"
    began = time.monotonic()
    with anyio.fail_after(80):
        async with open_board(url) as board:
            jobs = [await board.post("sleep", {"s": 0.1}) for _ in range(4 * ROUNDS)]
            for number in range(ROUNDS):
                code, err, delay = await anyio.to_thread.run_sync(one_round, url, rng, number % 2 == 1)
                assert code == 0, f"round {number} (seed {seed}, SIGTERM {delay:.3f}s in): exit {code}\n{err}"
                states = [await board.state(job) for job in jobs]
                assert JobState.CLAIMED not in states and JobState.TRASHED not in states, f"round {number}"
            left = [job for job in jobs if await board.state(job) is JobState.UNCLAIMED]
            print(f"{ROUNDS} rounds in {time.monotonic() - began:.1f}s; {len(jobs) - len(left)} of {len(jobs)} "
                  f"jobs done, {len(left)} back on the board; none claimed or trashed")
            await Worker(board, handlers, WorkerConfig(concurrency=4, burst=True)).run()
            assert [await board.state(job) for job in jobs] == [JobState.COMPLETE] * len(jobs)


@pytest.mark.parametrize("backend", ["zookeeper", "redis"])
def test_sigterm_while_the_server_is_down_exits_promptly(backend: str) -> None:
    """An idle worker whose server has gone away: SIGTERM exited only after 12 s on ZooKeeper and
    19 s on Redis (it waited its settle timeout to unregister an entity that goes with its session
    anyway, then the retry window to release a session the server expires anyway)."""
    from tests.support.redisserver import RedisServer
    from tests.support.zkserver import ZooKeeperServer

    name = f"down-{uuid.uuid4().hex}"
    with ZooKeeperServer() if backend == "zookeeper" else RedisServer() as server:
        url = (f"zookeeper://{server.hosts}/signals/{name}?session_timeout=6" if backend == "zookeeper"
               else server.url(f"/0/{name}"))
        child = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while "claiming" not in (line := child.stderr.readline() if child.stderr else "") and \
                    time.monotonic() < deadline:
                assert line or child.poll() is None, "the worker ended before it claimed"
            server.kill()
            time.sleep(2.0)  # the worker has seen the connection go
            started = time.monotonic()
            child.send_signal(signal.SIGTERM)
            _, err = child.communicate(timeout=30)
            took = time.monotonic() - started
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    print(f"exited {took:.1f}s after SIGTERM with its server down")
    assert child.returncode == 0
    assert took < 8.0, err  # 2 s at most for each of: a claim in flight, unregistering, the session
