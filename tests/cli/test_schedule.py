"""``jobboard schedule add|list|remove`` as real processes against a real ZooKeeper, and a worker
process with ``--schedule`` that runs what they store."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import anyio
import anyio.to_thread
import pytest

from jobboard import open_board
from jobboard.board.events import EventKind
from jobboard.schedules.scheduler import list_schedules

TIMEOUT = 60


@pytest.fixture
def url(zk_hosts: str) -> str:
    return f"zookeeper://{zk_hosts}/cli-schedule/{uuid.uuid4().hex}"


def cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", "--board", url, "schedule", *argv],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def test_add_list_remove(url: str) -> None:
    added = cli(url, "add", "nightly", "report", "--cron", "0 3 * * *", "--details", '{"to": "ops"}',
                "--catch-up", "once")
    assert added.returncode == 0
    assert "read the schedules every 10 s" in added.stderr  # when its first post may come, for a newcomer
    assert added.stdout == "schedule nightly: report cron 0 3 * * *\n"
    assert cli(url, "add", "beat", "tick", "--every", "30", "--priority", "high").returncode == 0
    listed = cli(url, "list")
    assert listed.returncode == 0
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        ["name", "job", "when"], ["beat", "tick", "every"], ["nightly", "report", "cron"]]
    records = json.loads(cli(url, "list", "--json").stdout)
    assert [(r["name"], r["catch_up"], r["details"]) for r in records] == [
        ("beat", "skip", {}), ("nightly", "once", {"to": "ops"})]
    removed = cli(url, "remove", "beat")
    assert (removed.returncode, removed.stdout) == (0, "removed schedule beat\n")
    gone = cli(url, "remove", "beat")
    assert gone.returncode == 1 and gone.stderr == "jobboard: error: no schedule 'beat' on the board\n"

    async def stored() -> list[str]:
        async with open_board(url) as board:
            return [schedule.name for schedule in await list_schedules(board)]

    assert anyio.run(stored) == ["nightly"]


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--cron", "61 * * * *"], "bad cron expression '61 * * * *'"),
    (["--cron", "every minute"], "bad cron expression 'every minute'"),
])
def test_bad_schedules_are_one_line_errors(url: str, argv: list[str], fragment: str) -> None:
    result = cli(url, "add", "s", "tick", *argv)
    assert result.returncode == 2 and result.stdout == ""  # a usage error, like --every -1
    assert result.stderr.startswith("usage: jobboard schedule add")  # as argparse reports every usage error
    last = result.stderr.splitlines()[-1]
    assert last.startswith("jobboard schedule add: error: argument --cron: ") and fragment in last
    assert cli(url, "list").stdout.splitlines()[1:] == []


def test_a_worker_process_with_schedule_posts_and_runs_the_periodic_job(url: str) -> None:
    assert cli(url, "add", "beat", "echo", "--every", "0.2", "--catch-up", "once").returncode == 0

    async def watch() -> None:
        async with open_board(url) as board:
            stream = board.events()
            worker = subprocess.Popen(  # noqa: ASYNC220 (started once, then awaited in a thread)
                [sys.executable, "-m", "jobboard", "--board", url, "worker", "--schedule",
                 "--handlers", "tests.support.cli_handlers:handlers"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                with anyio.fail_after(TIMEOUT):
                    consumed = 0
                    while consumed < 3:  # the scheduler posts one job every 0.2 s, the worker runs it
                        consumed += (await anext(stream)).kind is EventKind.CONSUMED
            finally:
                worker.terminate()
                out, err = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=TIMEOUT))
            assert worker.returncode == 0, err
            assert re.search(r"stopped: \d+ jobs: ([3-9]|\d\d+) consumed", out), out

    anyio.run(watch)


def test_post_with_delay_is_listed_unclaimed_with_its_due_time(url: str) -> None:
    base = [sys.executable, "-m", "jobboard", "--board", url]
    posted = subprocess.run([*base, "post", "later", "--delay", "600"], capture_output=True, text=True,
                            timeout=TIMEOUT, check=True)
    shown = subprocess.run([*base, "show", posted.stdout.strip(), "--json"], capture_output=True, text=True,
                           timeout=TIMEOUT, check=True)
    record = json.loads(shown.stdout)
    assert record["state"] == "unclaimed" and record["not_before"] != "-"
    refused = subprocess.run([*base, "post", "later", "--delay", "-1"], capture_output=True, text=True,
                             timeout=TIMEOUT, check=False)
    assert refused.returncode == 2 and "seconds must be a finite number >= 0" in refused.stderr  # argparse's usage
