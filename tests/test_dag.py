"""Plans: validation without I/O, and zk-plan's stress test on memory:// and ZooKeeper."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from jobboard import JobState, open_board
from jobboard.dag import InvalidPlan, Plan, to_dot, to_mermaid
from jobboard.handlers import Handlers
from jobboard.plans import post_plan
from jobboard.worker import Worker, WorkerConfig
from tests.support.plans import stress_plan

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["memory", "zookeeper"])
def board_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return f"memory://dag-{uuid.uuid4().hex}"
    return f"zookeeper://{request.getfixturevalue('zk_hosts')}/dag/{uuid.uuid4().hex}?session_timeout=4"


# -- building, no I/O ------------------------------------------------------------------


def test_plan_refuses_cycles_unknown_and_duplicate_tasks() -> None:
    plan = Plan("p")
    plan.task("a", name="x", after=["y"])
    plan.task("a", name="y", after=["x"])
    with pytest.raises(InvalidPlan, match="cycle"):
        plan.validate()
    unknown = Plan("u")
    unknown.task("a", after=["ghost"])
    with pytest.raises(InvalidPlan, match="'a-1' is after unknown task.*ghost"):
        unknown.validate()
    with pytest.raises(InvalidPlan, match="exists already"):
        unknown.task("b", name="a-1")
    with pytest.raises(InvalidPlan, match="no tasks"):
        Plan("empty").validate()


def test_plan_refuses_bad_arguments_foreign_tasks_and_reserved_names() -> None:
    plan = Plan("p")
    with pytest.raises(InvalidPlan, match=r"arguments of task 'a-1'\[1\]"):
        plan.task("a", 1, object())
    foreign = Plan("other").task("a")
    with pytest.raises(InvalidPlan, match="plan 'other'"):
        plan.task("b", after=[foreign])
    with pytest.raises(InvalidPlan, match="reserved"):
        plan.task("jobboard.sneaky")
    with pytest.raises(InvalidPlan, match="twice"):
        first = plan.task("a")
        plan.task("b", after=[first, first])


def test_generations_respect_dependencies_and_drawings_show_every_edge() -> None:
    plan = Plan("p")
    a, b = plan.task("fetch", name="a"), plan.task("fetch", name="b")
    plan.task("merge", name="m", after=[b, a])
    assert [[task.name for task in generation] for generation in plan.generations()] == [["a", "b"], ["m"]]
    dot = to_dot(plan.tasks, {"a": JobState.COMPLETE, "m": JobState.WAITING})
    assert '"b" -> "m";' in dot and '"a" -> "m";' in dot and "#a1d99b" in dot
    mermaid = to_mermaid(plan.tasks, {"a": JobState.COMPLETE})
    assert "t0 --> t2" in mermaid and "t1 --> t2" in mermaid and ":::complete" in mermaid


# -- running --------------------------------------------------------------------------


class StressHandlers:
    """zk-plan's check task: runs alone, gets exactly its dependencies' results in order."""

    def __init__(self) -> None:
        self.running: Counter[int] = Counter()
        self.ran: Counter[int] = Counter()
        self.violations: list[str] = []
        self.handlers = Handlers()
        self.handlers.task("check")(self.check)

    async def check(self, number: int, expected: list[int], *results: Any) -> int:
        self.running[number] += 1
        self.ran[number] += 1
        if self.running[number] > 1:
            self.violations.append(f"t{number} ran twice at once")
        if list(results) != expected:
            self.violations.append(f"t{number} got {list(results)}, expected {expected}")
        await anyio.sleep(0.005)
        self.running[number] -= 1
        return number


async def test_zk_plan_stress_ten_workers_hundred_tasks(board_url: str) -> None:
    stress = StressHandlers()
    plan = stress_plan()
    with anyio.fail_after(90):
        async with AsyncExitStack() as boards:
            board = await boards.enter_async_context(open_board(board_url))
            started = time.monotonic()
            handle = await post_plan(board, plan)
            workers = [Worker(await boards.enter_async_context(open_board(board_url)), stress.handlers,
                              WorkerConfig(owner=f"w{n}")) for n in range(10)]
            async with anyio.create_task_group() as group:
                for worker in workers:
                    group.start_soon(worker.run)
                outcome = await handle.wait()
                for worker in workers:
                    worker.stop()
            elapsed = time.monotonic() - started
            assert await board.job_count() == 0  # the plan's record is taken off too
    print(f"{board_url.split(':')[0]}: 100-task plan on 10 workers in {elapsed:.2f}s "
          f"({100 / elapsed:.0f} tasks/s)")
    assert outcome.state == "complete" and stress.violations == []
    assert outcome.results == {f"t{n}": n for n in range(100)}
    assert set(stress.ran) == set(range(100))
