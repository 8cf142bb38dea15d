"""``jobboard plan ...`` and ``jobboard demo`` as real processes."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from jobboard import JobBoard, open_board
from jobboard.plans.dag import Plan
from jobboard.plans.posting import PlanHandle, post_plan
from jobboard.worker.handlers import Handlers
from tests.support.workers import running

pytestmark = pytest.mark.timeout(90)


def jobboard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def small_plan() -> tuple[Plan, Handlers]:
    handlers = Handlers()

    @handlers.task("add")
    async def add(n: int, *inputs: int) -> int:
        await anyio.sleep(0.05)
        return n + sum(inputs)

    plan = Plan("sums")
    first = [plan.task("add", n, name=f"a{n}") for n in range(4)]
    plan.task("add", 100, name="total", after=first)
    return plan, handlers


@asynccontextmanager
async def small_plan_posted(zk_hosts: str) -> AsyncIterator[tuple[str, JobBoard, PlanHandle, Handlers]]:
    """:func:`small_plan` posted on a fresh zookeeper:// board, open for the body (60 s at most): the board's
    URL, the board, the plan's handle and the plan's handlers."""
    url = f"zookeeper://{zk_hosts}/cli-plan/{uuid.uuid4().hex}"
    plan, handlers = small_plan()
    with anyio.fail_after(60):
        async with open_board(url) as board:
            yield url, board, await post_plan(board, plan), handlers


async def test_plan_wait_status_and_show(zk_hosts: str) -> None:
    async with small_plan_posted(zk_hosts) as (url, board, handle, handlers):
        waiter = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobboard", "plan", "wait", handle.plan_id, "--board", url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with running(board, handlers):
            out, err = await waiter.communicate()
    assert waiter.returncode == 0, err
    assert out.decode().strip() == f"plan sums ({handle.plan_id}): complete"
    assert "5/5 done, 0 running, 0 failed" in err.decode()
    status = await anyio.to_thread.run_sync(jobboard, "plan", "status", handle.plan_id, "--board", url)
    assert status.returncode == 0
    assert "total" in status.stdout and f"plan sums ({handle.plan_id}): complete, 5/5 complete" in status.stdout
    dot = await anyio.to_thread.run_sync(jobboard, "plan", "show", handle.plan_id, "--format", "dot",
                                         "--board", url)
    assert dot.stdout.startswith("digraph plan {") and '"a0" -> "total";' in dot.stdout
    mermaid = await anyio.to_thread.run_sync(jobboard, "plan", "show", handle.plan_id, "--board", url)
    assert mermaid.stdout.startswith("flowchart LR") and ":::complete" in mermaid.stdout


async def test_plan_cancel_and_unknown_plan(zk_hosts: str) -> None:
    async with small_plan_posted(zk_hosts) as (url, board, handle, _):
        cancel = await anyio.to_thread.run_sync(jobboard, "plan", "cancel", handle.plan_id, "--board", url)
        assert cancel.returncode == 0 and "cancelled" in cancel.stdout
        status = await anyio.to_thread.run_sync(jobboard, "plan", "status", handle.plan_id, "--board", url)
        assert status.returncode == 1 and ": cancelled, 0/5 complete" in status.stdout
        assert await board.claim_next("w") is None
    unknown = await anyio.to_thread.run_sync(jobboard, "plan", "status", "0-0000000999999", "--board", url)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "no plan" in unknown.stderr
    cleanup = await anyio.to_thread.run_sync(jobboard, "plan", "cleanup", "--board", url)
    assert cleanup.returncode == 0 and "cleaned up 0" in cleanup.stdout


@pytest.mark.parametrize("where", [(), ("--in-process",)], ids=["worker-processes-on-sqlite", "in-process-memory"])
def test_demo_runs_a_plan_to_completion(where: tuple[str, ...]) -> None:
    demo = jobboard("demo", *where)
    assert demo.returncode == 0, demo.stderr
    assert "plan complete: 27 of 27 tasks done" in demo.stdout
    assert "published: even (4 images" in demo.stdout
    assert demo.stdout.rstrip().endswith("jobs left on the board: 0")
    retried = sum(int(found) for found in re.findall(r"(\d+) retried", demo.stdout))
    assert retried == 1, demo.stdout  # one download fails once, whichever process runs it


def test_the_demo_runs_on_three_worker_processes_that_share_one_file_board() -> None:
    demo = jobboard("demo")
    assert demo.returncode == 0, demo.stderr
    assert re.search(r"3 worker processes on sqlite:///\S+/demo\.db", demo.stdout), demo.stdout
    summaries = re.findall(r"^worker-(\d) stopped after [\d.]+s: (\d+) jobs", demo.stdout, re.MULTILINE)
    assert sorted(n for n, _ in summaries) == ["1", "2", "3"], demo.stdout
    assert sum(int(jobs) for _, jobs in summaries) == 27 + 1  # every task once, plus the retried attempt
