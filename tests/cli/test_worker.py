"""``jobboard worker`` and ``jobboard check`` as real processes against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from jobboard import JobState, open_board
from jobboard.cli import main
from tests.support.boards import claimed

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


@pytest.mark.parametrize(("spec", "message", "status"), [
    ("no_colon", "module:attribute", 2),  # a malformed argument: a usage error
    ("tests.support.nothing_here:handlers", "cannot load", 1),
    ("tests.support.cli_handlers:not_a_handler", "not callable", 1),
])
def test_worker_command_refuses_bad_handler_specs(
    spec: str, message: str, status: int, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", f"memory://{uuid.uuid4().hex}", "--handlers", spec]) == status
    error = capsys.readouterr().err
    assert error.startswith("jobboard: error:") and message in error and error.count("\n") == 1


def test_a_sigterm_while_the_worker_starts_is_a_clean_stop() -> None:
    """Bug 4: before the worker listened for signals, SIGTERM killed it (exit -15)."""
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", f"memory://{uuid.uuid4().hex}",
                              "--handlers", "tests.support.slow_handlers:handlers"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "importing"  # the handlers module is being imported
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    assert "SIGTERM received: stopping" in err and "stopped: 0 jobs" in out


def test_the_console_script_imports_handlers_from_the_current_directory(tmp_path: Path) -> None:
    """Bug 6: ``jobboard`` (the console script) did not search the current directory."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "jobs.py").write_text(
        "from jobboard.worker.handlers import Handlers\nhandlers = Handlers()\n\n"
        "@handlers.register('hello')\nasync def hello(ctx):\n    return 'hi'\n")
    (tmp_path / "app" / "broken.py").write_text("handlers = (\n")
    script = str(Path(sys.executable).with_name("jobboard"))
    ok = subprocess.run([script, "--board", "memory://cwd", "worker", "--handlers", "app.jobs:handlers", "--burst"],
                        capture_output=True, text=True, timeout=30, cwd=tmp_path, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "stopped: 0 jobs" in ok.stdout
    bad = subprocess.run([script, "--board", "memory://cwd", "worker", "--handlers", "app.broken:handlers"],
                         capture_output=True, text=True, timeout=30, cwd=tmp_path, check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith("jobboard: error: cannot load handlers 'app.broken:handlers': syntax error in ")
    assert "broken.py, line 1" in bad.stderr


async def test_worker_logs_a_json_line_per_job_a_drain_line_and_a_summary(zk_hosts: str) -> None:
    """Bug 5: nothing showed what the worker did, nor that it was draining."""
    url = f"zookeeper://{zk_hosts}/cli-logs/{uuid.uuid4().hex}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS, "--owner", "logger-1",
        "--log-format", "json", "--grace-period", "10", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    with anyio.fail_after(30):  # with json logs, stdout stays empty: the worker is ready at its "claiming" line
        while "logger-1 claiming" not in json.loads(await child.stderr.readline())["message"]:
            pass
        async with open_board(url) as board:
            done = await board.post("echo", {"n": 1})
            failing = await board.post("fail")
            await board.wait_for_completion(done)
            await board.wait_for_completion(failing)
            events = board.events()
            slow = await board.post("sleep", {"s": 1.0})
            await claimed(events, slow.id)
            child.send_signal(signal.SIGTERM)
            lines = [json.loads(await child.stderr.readline()) for _ in range(7)]
            assert any("SIGTERM received: stopping" in line["message"] for line in lines)
            assert any("draining: 1 running job(s) get up to 10.0s" in line["message"] for line in lines)
            assert await child.wait() == 0
            assert await board.state(slow) is JobState.COMPLETE  # finished within the grace period
    lines += [json.loads(line) for line in (await child.stderr.read()).decode().splitlines()]
    assert await child.stdout.read() == b"", "stdout holds only JSON with --log-format json: nothing at all here"
    jobs = [line for line in lines if "outcome" in line]
    assert [(line["job_name"], line["outcome"]) for line in jobs] == [
        ("echo", "consumed"), ("fail", "retried"), ("fail", "failed"), ("sleep", "consumed")]
    assert all(line["logger"] == "jobboard.worker" and line["owner"] == "logger-1" and "time" in line
               for line in jobs)
    assert jobs[1]["error"] == "ValueError: always fails (attempt 1)" and jobs[1]["retry_in"] > 0
    assert "stopped after" in lines[-1]["message"] and "4 jobs: 2 consumed, 1 retried, 1 failed" in lines[-1]["message"]
    assert not any(line["logger"].startswith("aiozk") for line in lines)  # client chatter only at debug


async def test_cancel_command_stops_a_running_job(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/cli-cancel/{uuid.uuid4().hex}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    await child.stdout.readline()
    with anyio.fail_after(30):
        async with open_board(url) as board:
            events = board.events()
            job = await board.post("sleep", {"s": 60})
            await claimed(events, job.id)
            done = await anyio.to_thread.run_sync(jobboard, "cancel", job.id, "--board", url, "--reason", "enough")
            assert done.returncode == 0 and "claim by" in done.stdout and "revoked" in done.stdout
            outcome = await board.wait_for_completion(job)
            shown = await anyio.to_thread.run_sync(jobboard, "show", job.id, "--board", url)
        child.send_signal(signal.SIGTERM)
        _, err = await child.communicate()
    assert (outcome.state, outcome.reason) == (JobState.TRASHED, "enough")
    assert "state:" in shown.stdout and "trashed" in shown.stdout and "enough" in shown.stdout
    assert b"cancelled sleep" in err and child.returncode == 0


PROBE = """
import signal, sys
import jobboard.launch
heavy = sorted(m for m in ("jobboard.cli", "jobboard.board.contract", "anyio", "asyncio", "msgpack") if m in sys.modules)
print("heavy after importing the entry point:", heavy)

class Probe:
    def find_spec(self, name, path, target=None):
        if name == "jobboard.cli":
            print("SIGTERM caught when jobboard.cli is imported:", signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)
        return None

sys.meta_path.insert(0, Probe())
sys.argv = ["jobboard", "worker", "--help"]
jobboard.launch.main()
"""


def test_jobboard_worker_catches_sigterm_before_its_heavy_imports() -> None:
    """Bug 4's last window: the ~0.15 s of imports before the worker's handler was installed.
    The entry point is cheap to import and installs it before importing the command line."""
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=30, check=False)
    assert probe.returncode == 0, probe.stderr
    assert "heavy after importing the entry point: []" in probe.stdout
    assert "SIGTERM caught when jobboard.cli is imported: True" in probe.stdout


async def test_sigterm_does_not_wait_for_a_plain_def_handler_thread(zk_hosts: str) -> None:
    """The job goes back to the board after the grace period, and the process exits then too:
    not when the handler's thread (which nothing can interrupt) finishes 30 s later."""
    url = f"zookeeper://{zk_hosts}/cli-worker/{uuid.uuid4().hex}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS, "--grace-period", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    try:
        with anyio.fail_after(40):
            assert (await child.stdout.readline()).startswith(b"worker ")
            async with open_board(url) as board:
                events = board.events()
                job = await board.post("block", {"s": 30})
                await claimed(events, job.id)
                child.send_signal(signal.SIGTERM)
                started = anyio.current_time()
                _, err = await child.communicate()
                stopped_after = anyio.current_time() - started
                assert await board.state(job) is JobState.UNCLAIMED
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0, err.decode()
    assert stopped_after < 12, f"the process waited {stopped_after:.1f} s for the handler's thread"
    assert b"exiting with 1 handler thread(s) still running" in err
