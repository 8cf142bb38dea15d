"""Plans on a real ZooKeeper: a worker process SIGKILLed mid-plan, and a 2000-task plan."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from jobboard import EventKind, open_board
from jobboard.plans.posting import post_plan
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers
from tests.support.plans import stress_plan, wide_and_deep_plan
from tests.support.processes import spawn_ready

pytestmark = pytest.mark.timeout(180)


async def spawn(url: str, directory: Path) -> asyncio.subprocess.Process:
    return await spawn_ready("tests.support.plan_worker", url, str(directory))


async def test_stress_plan_survives_a_killed_worker_process(zk_hosts: str, tmp_path: Path) -> None:
    url = f"zookeeper://{zk_hosts}/dag-kill/{uuid.uuid4().hex}?session_timeout=2"
    with anyio.fail_after(150):
        async with open_board(url) as board:
            killed = anyio.Event()
            workers = [await spawn(url, tmp_path) for _ in range(5)]  # 5 processes x 2 = 10 workers

            async def kill_one_mid_plan(slow_job: str) -> None:
                """SIGKILL the process running the slow task t50 (1.5 s) while it runs."""
                async for event in stream:
                    if event.kind is EventKind.CLAIMED and event.job_id == slow_job:
                        with anyio.fail_after(10):  # its handler has started (claims precede runs)
                            while "t50 " not in await anyio.Path(tmp_path / "runs.log").read_text():  # noqa: ASYNC110 - another process writes it
                                await anyio.sleep(0.01)
                        owner = await board.owner(event.job_id)
                        victims = [n for n, w in enumerate(workers) if owner and f"-{w.pid}-" in owner]
                        if victims:
                            workers[victims[0]].kill()
                            await workers[victims[0]].wait()
                            killed.set()
                            workers[victims[0]] = await spawn(url, tmp_path)
                            return

            started = time.monotonic()
            stream = board.events(maxlen=100_000)
            handle = await post_plan(board, stress_plan())
            async with anyio.create_task_group() as group:
                group.start_soon(kill_one_mid_plan, handle.ids["t50"])
                outcome = await handle.wait()
            elapsed = time.monotonic() - started
            for child in workers:
                child.send_signal(signal.SIGTERM)
            assert [await child.wait() for child in workers] == [0] * 5
    runs = (tmp_path / "runs.log").read_text().split("\n")
    violations = (tmp_path / "violations.log").read_text() if (tmp_path / "violations.log").exists() else ""
    reruns = len([line for line in runs if line]) - 100
    print(f"100-task plan, 10 workers in 5 processes, one SIGKILLed mid-plan: {elapsed:.1f}s, "
          f"{100 / elapsed:.0f} tasks/s, {reruns} tasks re-ran after the kill")
    assert killed.is_set() and reruns >= 1  # the kill hit t50 in flight, and it ran again
    assert outcome.state == "complete" and violations == ""
    assert outcome.results == {f"t{n}": n for n in range(100)}


async def test_two_thousand_task_plan_on_four_workers(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/dag-2000/{uuid.uuid4().hex}?session_timeout=10"
    handlers = Handlers()

    @handlers.task("step")
    async def step(layer: int, *inputs: int) -> int:
        return layer + sum(inputs) % 7

    plan = wide_and_deep_plan()
    assert len(plan.tasks) == 2000
    with anyio.fail_after(150):
        async with AsyncExitStack() as boards:
            board = await boards.enter_async_context(open_board(url))
            started = time.monotonic()
            handle = await post_plan(board, plan)
            posted = time.monotonic()
            workers = [Worker(await boards.enter_async_context(open_board(url)), handlers,
                              WorkerConfig(concurrency=8)) for _ in range(4)]
            outcome = await handle.run_on(workers)
            finished = time.monotonic()
    run = finished - posted
    print(f"2000-task plan (40 layers x 50, fan-in 3) on 4 workers: posted in {posted - started:.1f}s, "
          f"ran in {run:.1f}s = {2000 / run:.0f} tasks/s ({2000 / (finished - started):.0f} tasks/s overall)")
    assert outcome.state == "complete" and len(outcome.results) == 2000
