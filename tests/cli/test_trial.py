"""What a new user's trial of the command line found (one test each, as real processes)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid

import anyio
import pytest

from jobboard import open_board

pytestmark = pytest.mark.timeout(60)


def jobboard(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *argv], capture_output=True, text=True, timeout=30,
                          check=False)


@pytest.mark.parametrize("argv", [
    ("metrics", "--port", "99999"), ("dashboard", "--port", "99999"), ("dashboard", "--port", "-1"),
    ("worker", "--handlers", "x:y", "--metrics-port", "70000"),
    ("post", "x", "--delay", "-1"), ("post", "x", "--delay", "nan"),
    ("schedule", "add", "b", "ping", "--every", "0"), ("schedule", "add", "b", "ping", "--every", "-1"),
    ("dashboard", "--allow-actions", "--token", "short"), ("dashboard", "--allow-actions"),
    ("requeue", "--all", "1"),
])
def test_bad_values_are_usage_errors_in_one_line(argv: tuple[str, ...]) -> None:
    """A port out of range printed a traceback (metrics) or 60 lines (dashboard); negative or NaN
    seconds and a short token exited 1 like a failed command."""
    done = jobboard("--board", f"memory://trial-{uuid.uuid4().hex}", *argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]  # after argparse's usage lines
    assert len(errors) == 1 and errors[0] == done.stderr.splitlines()[-1], done.stderr


def test_the_dashboard_on_a_busy_port_says_so_in_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = jobboard("--board", "memory://trial", "dashboard", "--port", str(port))
    assert done.returncode == 1 and done.stdout == ""  # nothing claimed to be served
    assert done.stderr.strip() == f"jobboard: error: cannot serve the dashboard on 127.0.0.1:{port}: " \
                                  "Address already in use"


async def test_requeue_of_a_job_not_in_the_trash_is_an_error_line_and_plan_of_an_unknown_id(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/trial/{uuid.uuid4().hex}"
    async with open_board(url) as board:
        job = await board.post("on-the-board")
    requeued = await anyio.to_thread.run_sync(jobboard, "--board", url, "requeue", job.id)
    assert requeued.returncode == 1 and requeued.stdout == ""
    assert requeued.stderr.startswith(f"jobboard: error: not requeued {job.id}: ")
    plan = await anyio.to_thread.run_sync(jobboard, "--board", url, "plan", "status", "9-9999999999999")
    assert plan.returncode == 1
    assert plan.stderr.strip() == ("jobboard: error: no plan 9-9999999999999 on this board "
                                   "(nor the record of a finished one)")


async def test_post_can_keep_the_result_for_result_and_wait(zk_hosts: str) -> None:
    """`jobboard post` had no --keep-result: `result` and `wait` could never show one."""
    url = f"zookeeper://{zk_hosts}/trial/{uuid.uuid4().hex}"
    posted = await anyio.to_thread.run_sync(jobboard, "--board", url, "post", "report", "--keep-result")
    assert posted.returncode == 0, posted.stderr
    with anyio.fail_after(20):
        async with open_board(url) as board:
            claim = await board.claim(posted.stdout.strip(), "w1")
            await board.consume(claim, {"pages": 3})
    shown = await anyio.to_thread.run_sync(jobboard, "--board", url, "result", posted.stdout.strip())
    assert shown.returncode == 0 and '"pages": 3' in shown.stdout, shown.stdout


async def test_list_and_top_show_when_a_delayed_job_is_due(zk_hosts: str) -> None:
    """A job posted with --delay was listed as a plain `unclaimed` row: nothing said it could not be claimed."""
    url = f"zookeeper://{zk_hosts}/trial/{uuid.uuid4().hex}"
    plain = await anyio.to_thread.run_sync(jobboard, "--board", url, "post", "now")
    listed = await anyio.to_thread.run_sync(jobboard, "--board", url, "list")
    assert listed.returncode == 0 and "due" not in listed.stdout.splitlines()[0], listed.stdout  # only when needed
    delayed = await anyio.to_thread.run_sync(jobboard, "--board", url, "post", "later", "--delay", "600")
    for argv in (("list",), ("top", "--once")):
        shown = await anyio.to_thread.run_sync(jobboard, "--board", url, *argv)
        assert shown.returncode == 0, shown.stderr
        table = shown.stdout[shown.stdout.index("id  "):].splitlines()
        assert table[0].split()[4] == "due", shown.stdout
        rows = {line.split()[0]: line.split() for line in table[1:] if line.strip()}
        assert rows[plain.stdout.strip()][4] == "-"
        due = rows[delayed.stdout.strip()]
        assert due[3] == "unclaimed" and due[4] == "in" and re.fullmatch(r"9m[0-5]\ds|10m00s", due[5]), due
        assert due[6].startswith("(20") and due[6].endswith("+00:00)"), due
