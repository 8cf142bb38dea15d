"""Plans: validation without I/O, and zk-plan's stress test on memory:// and ZooKeeper."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from jobboard import EventKind, InvalidJob, JobBoardError, JobState, open_board
from jobboard.plans.dag import InvalidPlan, Plan, to_dot, to_mermaid
from jobboard.plans.posting import PlanHandle, post_plan
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers, RetryPolicy
from tests.support.boards import BACKENDS, fresh_board_url
from tests.support.plans import stress_plan

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "dag")


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
            outcome = await handle.run_on(workers)
            elapsed = time.monotonic() - started
            assert await board.job_count() == 0  # the plan's record is taken off too
    print(f"{board_url.split(':')[0]}: 100-task plan on 10 workers in {elapsed:.2f}s "
          f"({100 / elapsed:.0f} tasks/s)")
    assert outcome.state == "complete" and stress.violations == []
    assert outcome.results == {f"t{n}": n for n in range(100)}
    assert set(stress.ran) == set(range(100))


async def run_plan(board_url: str, plan: Plan, handlers: Handlers, *, workers: int = 2,
                   fail_fast: bool = False) -> tuple[PlanHandle, Any]:
    async with AsyncExitStack() as boards:
        board = await boards.enter_async_context(open_board(board_url))
        handle = await post_plan(board, plan, fail_fast=fail_fast)
        running = [Worker(await boards.enter_async_context(open_board(board_url)), handlers,
                          WorkerConfig(retry=RetryPolicy(max_attempts=2, initial_delay=0))) for _ in range(workers)]
        return handle, await handle.run_on(running)


def failing_plan() -> tuple[Plan, Handlers]:
    handlers = Handlers()

    @handlers.task("ok")
    async def ok(label: str, *inputs: str) -> str:
        return "+".join([label, *inputs])

    @handlers.task("boom")
    async def boom(*inputs: str) -> str:
        await anyio.sleep(0.3)
        raise RuntimeError("boom")

    plan = Plan("failing")
    source = plan.task("ok", "source", name="source")
    broken = plan.task("boom", name="broken", after=[source])
    plan.task("ok", "after-broken", name="downstream", after=[broken])
    side = plan.task("ok", "side", name="side")
    plan.task("ok", "later", name="later", after=[side])
    return plan, handlers


async def test_failing_task_fails_the_plan_and_trashes_only_downstream(board_url: str) -> None:
    plan, handlers = failing_plan()
    with anyio.fail_after(60):
        _, outcome = await run_plan(board_url, plan, handlers)
    assert outcome.state == "failed"
    assert outcome.results == {"source": "source", "side": "side", "later": "later+side"}
    assert "RuntimeError: boom" in outcome.failed["broken"]
    assert "dependency" in outcome.failed["downstream"] and "boom" in outcome.failed["downstream"]


async def test_fail_fast_cancels_what_has_not_run(board_url: str) -> None:
    plan, handlers = failing_plan()
    blocker = Plan("failing")  # same tasks, but 'side' must wait for 'broken' to have failed
    for task in plan.tasks.values():
        after = [*task.after, "broken"] if task.name == "later" else list(task.after)
        blocker.task(task.handler, *task.args, name=task.name, after=after)
    with anyio.fail_after(60):
        _, outcome = await run_plan(board_url, blocker, handlers, workers=1, fail_fast=True)
    assert outcome.state in ("failed", "cancelled")
    assert "later" in outcome.failed and "source" in outcome.results


async def test_interrupted_post_leaves_nothing_runnable(board_url: str) -> None:
    plan = Plan("too-big")
    for number in range(20):
        plan.task("ok", number, name=f"t{number}")
    plan.task("ok", "x" * 2_000_000, name="huge")  # encodable, but over the posting limit
    with anyio.fail_after(60):
        async with open_board(board_url) as board:
            with pytest.raises(InvalidJob, match="limit"):
                await post_plan(board, plan)
            assert await board.claim_next("w1") is None
            assert await board.job_count() == 0
            trashed = [item async for item in board.trashed()]  # the gate, and whatever was posted
            assert trashed and all("interrupted" in item.reason for item in trashed)
            assert {item.job.name for item in trashed} <= {"jobboard.plan-gate", "ok"}


async def test_a_generation_with_an_invalid_task_is_not_posted_at_all(board_url: str) -> None:
    """A plan's generation is one ``post_many``, checked whole before anything of it is written."""
    plan = Plan("bad-second-layer")
    first = [plan.task("ok", number, name=f"a{number}") for number in range(5)]
    for number in range(10):
        plan.task("ok", number, name=f"b{number}", after=first)
    plan.task("ok", "x" * 2_000_000, name="huge", after=first)  # sorted after the b tasks
    with anyio.fail_after(60):
        async with open_board(board_url) as board:
            with pytest.raises(InvalidJob, match="limit"):
                await post_plan(board, plan)
            assert await board.job_count() == 0
            trashed = Counter([item.job.details.get("task", item.job.name) async for item in board.trashed()])
    assert trashed == Counter(["jobboard.plan-gate", *(f"a{number}" for number in range(5))])


async def test_dead_poster_leaves_nothing_runnable_and_cleanup_removes_it(board_url: str) -> None:
    from jobboard.plans.posting import cleanup_interrupted_plans

    plan = Plan("orphan")
    for number in range(30):
        plan.task("ok", number, name=f"t{number}", after=[f"t{number - 1}"] if number else [])
    with anyio.fail_after(60):
        async with open_board(board_url) as survivor:
            poster = await open_board(board_url).__aenter__()

            async def die_after_ten_posts() -> None:  # the poster's board (its session) goes away
                seen = 0
                async for event in survivor.events():
                    seen += event.kind is EventKind.POSTED
                    if seen == 10:
                        await poster.aclose()
                        return

            async with anyio.create_task_group() as group:
                group.start_soon(die_after_ten_posts)
                with pytest.raises(JobBoardError):
                    await post_plan(poster, plan)
            posted = await survivor.job_count()
            assert posted > 0
            assert await survivor.claim_next("w1") is None  # nothing of a half-posted plan runs
            assert await cleanup_interrupted_plans(survivor) == 1
            assert await survivor.job_count() == 0


async def test_plan_progress_never_goes_backwards() -> None:
    """A task's events from before the states were read (claimed, then consumed) were replayed
    over its complete state: the done count went back (115 -> 114 in a 150-task plan)."""
    plan = Plan("progress")
    plan.task("work", name="a")
    plan.task("work", name="b")
    with anyio.fail_after(20):
        async with open_board(f"memory://progress-{uuid.uuid4().hex}") as board:
            handle = await post_plan(board, plan)
            first_read = handle.status

            async def status_after_a_task_ran() -> Any:
                handle.status = first_read  # type: ignore[method-assign]
                claim = await board.claim_next("w", names=["work"])  # runs between the subscription
                assert claim is not None                             # and the first read of the states
                await board.consume(claim, "done")
                return await first_read()

            async def run_the_other() -> None:
                await anyio.sleep(0.2)
                claim = await board.claim_next("w", names=["work"])
                assert claim is not None
                await board.consume(claim, "done")

            handle.status = status_after_a_task_ran  # type: ignore[method-assign]
            done: list[int] = []
            async with anyio.create_task_group() as group:
                group.start_soon(run_the_other)
                outcome = await handle.wait(lambda progress: done.append(progress.done))
    assert outcome.state == "complete"
    assert done == sorted(done) and done[-1] == 2, done
