"""``jobboard worker`` and ``jobboard check`` as real processes against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid

import anyio
import pytest

from jobboard import open_board
from jobboard.cli import main

pytestmark = pytest.mark.timeout(60)

HANDLERS = "tests.support.cli_handlers:handlers"


def jobboard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *args], capture_output=True, text=True,
                          timeout=30, check=False)


async def test_worker_command_runs_jobs_and_check_sees_it(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/cli-worker/{uuid.uuid4().hex}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS, "--owner", "cli-w1",
        "--concurrency", "2", stdout=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    assert (await child.stdout.readline()).startswith(b"worker cli-w1 on ")
    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await board.post("echo", {"hello": "world"}, keep_result=True)
            outcome = await board.wait_for_completion(job)
    assert outcome.result == {"hello": "world"}
    alive = await anyio.to_thread.run_sync(jobboard, "check", url)
    assert alive.returncode == 0 and "cli-w1" in alive.stdout
    named = await anyio.to_thread.run_sync(jobboard, "check", url, "--name", "someone-else")
    assert named.returncode == 1 and "someone-else: not registered" in named.stderr
    child.send_signal(signal.SIGTERM)
    assert await child.wait() == 0
    gone = await anyio.to_thread.run_sync(jobboard, "check", url)
    assert gone.returncode == 1 and "no live workers" in gone.stderr


@pytest.mark.parametrize(("spec", "message"), [
    ("no_colon", "module:attribute"),
    ("tests.support.nothing_here:handlers", "cannot load"),
    ("tests.support.cli_handlers:not_a_handler", "not callable"),
])
def test_worker_command_refuses_bad_handler_specs(
    spec: str, message: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", f"memory://{uuid.uuid4().hex}", "--handlers", spec]) == 1
    error = capsys.readouterr().err
    assert error.startswith("jobboard: error:") and message in error and error.count("\n") == 1
