"""Posting a :class:`~jobboard.plans.dag.Plan` as linked jobs, and following it.

A plan is never half-visible. :func:`post_plan` first posts a *gate* job and
claims it, posts every task (tasks without dependencies wait on the gate), posts
the plan's *record* (its manifest), and only then consumes the gate, which
releases the first tasks atomically. If posting fails, trashing the gate
cascades to every task posted so far. If the poster dies, the gate is never
consumed, so nothing runs; :func:`cleanup_interrupted_plans` trashes such
leftovers. Gate and record are internal jobs (``jobboard.``): workers never
claim them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from jobboard.board.contract import JobBoard, NewJob
from jobboard.board.events import EventKind
from jobboard.errors import AlreadyClaimed, JobBoardError, JobNotFound
from jobboard.job import INTERNAL_PREFIX, Claim, Job, JobState, Priority
from jobboard.job import Progress as JobProgress
from jobboard.plans.dag import Plan, Task

if TYPE_CHECKING:
    from jobboard.worker.conductor import Worker

GATE = f"{INTERNAL_PREFIX}plan-gate"
RECORD = f"{INTERNAL_PREFIX}plan"
READ_CONCURRENCY = 64
"""Task states read at once by :meth:`PlanHandle.status`."""

Progress = Callable[["PlanProgress"], None]
TaskFunction = Callable[..., Awaitable[Any]]
"""A plan task's function (``Handlers.task``): called with its arguments, then its dependencies' results."""
FOLLOWS = {EventKind.CLAIMED: JobState.CLAIMED, EventKind.RELEASED: JobState.UNCLAIMED,
           EventKind.READY: JobState.UNCLAIMED, EventKind.CONSUMED: JobState.COMPLETE,
           EventKind.TRASHED: JobState.TRASHED}
"""How a board event moves a task's state."""
FINAL = frozenset({JobState.COMPLETE, JobState.TRASHED})
"""States a task never leaves."""
RESYNC = {EventKind.DROPPED, EventKind.RECONNECTED, EventKind.SESSION_EXPIRED}
"""Events after which the states are read again."""


def task_details(plan: str, gate: str, task: Task) -> dict[str, Any]:
    """The details of a task's job, as :func:`task_arguments` reads them."""
    return {"plan": plan, "gate": gate, "task": task.name, "args": list(task.args), "after": list(task.after)}


def task_arguments(details: Mapping[str, Any], job: Job, results: tuple[Any, ...]) -> list[Any]:
    """A plan task's call arguments: its own, then its dependencies' results (the gate's left out)."""
    gate = details.get("gate")
    return [*details.get("args", ()),
            *(result for dep, result in zip(job.depends_on, results, strict=True) if dep != gate)]


def follow(states: dict[str, JobState], task: str, state: JobState) -> None:
    """Move a task to ``state`` unless it ended: an event from before the states were read
    (replayed after them) must not move a complete or trashed task back, nor progress."""
    if states.get(task) not in FINAL:
        states[task] = state


@dataclass(frozen=True, slots=True)
class PlanProgress:
    total: int
    done: int
    failed: int
    running: int


@dataclass
class PlanStatus:
    """Where every task of a plan stands."""

    plan_id: str
    name: str
    states: dict[str, JobState]
    owners: dict[str, str] = field(default_factory=dict)
    """Running tasks and their owners."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Trashed tasks and why."""
    progress_of: dict[str, JobProgress] = field(default_factory=dict)
    """Running tasks' last reported progress (``JobContext.progress``)."""

    @property
    def counts(self) -> dict[JobState, int]:
        return {state: list(self.states.values()).count(state) for state in JobState}

    @property
    def state(self) -> str:
        """``running``, ``complete``, ``failed`` (some task trashed) or ``cancelled``."""
        if any(state not in FINAL for state in self.states.values()):
            return "running"
        if any(reason.startswith("plan cancelled") for reason in self.reasons.values()):
            return "cancelled"
        return "failed" if JobState.TRASHED in self.states.values() else "complete"

    def progress(self) -> PlanProgress:
        counts = self.counts
        return PlanProgress(len(self.states), counts[JobState.COMPLETE], counts[JobState.TRASHED],
                            counts[JobState.CLAIMED])


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    plan_id: str
    state: str
    results: dict[str, Any]
    """Results of the tasks that completed, by task name."""
    failed: dict[str, str]
    """Trashed tasks and why."""


async def post_plan(board: JobBoard, plan: Plan, *, fail_fast: bool = False) -> PlanHandle:
    """Post every task of ``plan`` as a linked job; nothing runs until all are posted.

    :param fail_fast: when a task fails for good, ``PlanHandle.wait`` cancels the
        tasks that have not run (otherwise only its downstream tasks are trashed).
    :raises InvalidPlan: the plan does not validate (nothing is posted).
    """
    generations = list(plan.generations())
    gate = await board.post(GATE, {"plan": plan.name}, priority=Priority.VERY_HIGH)
    gate_claim = await board.claim(gate, f"planner-{uuid.uuid4().hex[:8]}")
    try:
        ids = await _post_tasks(board, plan.name, gate.id, generations)
        manifest = {"v": 1, "name": plan.name, "gate": gate.id, "fail_fast": fail_fast,
                    "tasks": {name: {"id": ids[name], "handler": task.handler, "after": list(task.after)}
                              for name, task in plan.tasks.items()}}
        record = await board.post(RECORD, manifest, priority=Priority.VERY_LOW, keep_result=True)
        await board.consume(gate_claim)
    except BaseException as error:
        with anyio.CancelScope(shield=True):
            await _abort_posting(board, gate_claim, error)
        raise
    return PlanHandle(board, record.id, manifest)


async def _post_tasks(board: JobBoard, plan: str, gate: str, generations: list[list[Task]]) -> dict[str, str]:
    """Post the tasks with one ``post_many`` per generation: a task's dependencies are posted
    (by an earlier generation) before it, as ``post_many`` needs; tasks without any wait on the gate."""
    ids: dict[str, str] = {}
    for generation in generations:
        await anyio.lowlevel.checkpoint()  # other tasks run between generations (memory:// posts never suspend)
        jobs = await board.post_many([
            NewJob(task.handler, task_details(plan, gate, task), depends_on=[ids[name] for name in task.after] or [gate], priority=task.priority,
                   max_attempts=task.max_attempts, keep_result=True)
            for task in generation])
        ids.update((task.name, job.id) for task, job in zip(generation, jobs, strict=True))
    return ids


async def _abort_posting(board: JobBoard, gate_claim: Claim, error: BaseException) -> None:
    try:
        await board.trash(gate_claim, f"plan posting interrupted: {error!r}")
    except JobBoardError:
        pass  # the board is gone too; cleanup_interrupted_plans() removes the rest later


async def cleanup_interrupted_plans(board: JobBoard) -> int:
    """Trash plans whose posting never finished (their gate is unclaimed); returns how many."""
    cleaned = 0
    gates = [job async for job in board.iterjobs(only_unclaimed=True) if job.name == GATE]
    for gate in gates:
        try:
            await board.cancel(gate, "plan posting was interrupted")
            cleaned += 1
        except (AlreadyClaimed, JobNotFound):
            continue  # a poster is still at work, or another cleanup won
    return cleaned


class PlanHandle:
    """A posted plan: wait for it, inspect it, collect its results, cancel it."""

    def __init__(self, board: JobBoard, plan_id: str, manifest: dict[str, Any]) -> None:
        self.board, self.plan_id, self.manifest = board, plan_id, manifest
        self.name: str = manifest["name"]
        self.ids: dict[str, str] = {name: spec["id"] for name, spec in manifest["tasks"].items()}
        self.tasks = {name: Task(name, spec["handler"], after=tuple(spec["after"]))
                      for name, spec in manifest["tasks"].items()}
        self._cancelled = False

    @classmethod
    async def open(cls, board: JobBoard, plan_id: str) -> PlanHandle:
        """Find a posted plan by id (the id ``post_plan`` returned).

        :raises JobNotFound: no such plan on this board.
        """
        try:
            manifest: Any = dict((await board.get(plan_id)).details)
        except JobNotFound:
            outcome = await board.wait_for_completion(plan_id)  # finished plans keep their record
            manifest = outcome.result
            if outcome.state is not JobState.COMPLETE or not _is_manifest(manifest):
                raise JobNotFound(f"no plan {plan_id} on this board (nor the record of a finished one)") from None
        if not _is_manifest(manifest):
            raise JobNotFound(f"{plan_id} is a job, not a plan (no plan with this id on this board)")
        return cls(board, plan_id, manifest)

    async def status(self) -> PlanStatus:
        """Every task's state, who runs the running ones, why the trashed ones failed."""
        limiter = anyio.CapacityLimiter(READ_CONCURRENCY)
        states: dict[str, JobState] = {}
        owners: dict[str, str] = {}
        progress_of: dict[str, JobProgress] = {}

        async def look(name: str, job_id: str) -> None:
            async with limiter:
                states[name] = await self.board.state(job_id)
                if states[name] is JobState.CLAIMED and (owner := await self.board.owner(job_id)):
                    owners[name] = owner
                    with contextlib.suppress(JobNotFound):
                        if (reported := (await self.board.get(job_id)).progress) is not None:
                            progress_of[name] = reported

        async with anyio.create_task_group() as group:
            for name, job_id in self.ids.items():
                group.start_soon(look, name, job_id)
        names = {job_id: name for name, job_id in self.ids.items()}
        reasons = {names[t.job.id]: t.reason async for t in self.board.trashed() if t.job.id in names}
        return PlanStatus(self.plan_id, self.name, dict(sorted(states.items())), owners, reasons, progress_of)

    async def wait(self, on_progress: Progress | None = None) -> PlanOutcome:
        """Wait until every task is consumed or trashed; return the outcome.

        Event-driven: task states are read once, then followed through board
        events (read again only after lost events or a reconnect).
        """
        names = {job_id: name for name, job_id in self.ids.items()}
        async with self.board.events(maxlen=100_000) as stream:
            status = await self.status()
            while status.state == "running":
                await self._apply_fail_fast(status)
                if on_progress:
                    on_progress(status.progress())
                event = await anext(stream)
                if event.kind in RESYNC:
                    status = await self.status()
                elif event.job_id in names and event.kind in FOLLOWS:
                    follow(status.states, names[event.job_id], FOLLOWS[event.kind])
        status = await self.status()  # the reasons, and states settled for certain
        if on_progress:
            on_progress(status.progress())
        outcome = PlanOutcome(self.plan_id, status.state, await self.results(), status.reasons)
        await self._finalize(status)
        return outcome

    async def _apply_fail_fast(self, status: PlanStatus) -> None:
        if self.manifest.get("fail_fast") and not self._cancelled and JobState.TRASHED in status.states.values():
            self._cancelled = True
            await self.cancel("plan cancelled: a task failed (fail_fast)")

    async def run_on(self, workers: Sequence[Worker], on_progress: Progress | None = None) -> PlanOutcome:
        """Run ``workers`` until the plan ends, then stop them; for scripts, demos and tests.

        Services usually run their workers on their own and only ``wait()`` here.
        """
        outcomes: list[PlanOutcome] = []
        async with anyio.create_task_group() as group:
            for worker in workers:
                group.start_soon(worker.run)
            try:
                outcomes.append(await self.wait(on_progress))
            finally:
                for worker in workers:
                    worker.stop()
        return outcomes[0]

    async def results(self) -> dict[str, Any]:
        """Results of the completed tasks, by task name."""
        results = {}
        for name, job_id in self.ids.items():
            if await self.board.state(job_id) is JobState.COMPLETE:
                results[name] = (await self.board.wait_for_completion(job_id)).result
        return results

    async def cancel(self, reason: str = "plan cancelled") -> int:
        """Trash every task that has not started (running ones finish); returns how many."""
        cancelled = 0
        for job_id in self.ids.values():
            try:
                if await self.board.state(job_id) is JobState.CLAIMED:
                    continue  # running: it finishes (board.cancel would revoke its claim)
                await self.board.cancel(job_id, reason if reason.startswith("plan cancelled")
                                        else f"plan cancelled: {reason}")
                cancelled += 1
            except (AlreadyClaimed, JobNotFound):
                continue  # running, finished, or trashed with an earlier task
        return cancelled

    async def _finalize(self, status: PlanStatus) -> None:
        """Take the record off the board, keeping the manifest and final states as its result."""
        summary = {**self.manifest, "state": status.state,
                   "states": {name: state.value for name, state in status.states.items()}}
        try:
            claim = await self.board.claim(self.plan_id, f"plan-{self.plan_id}")
            await self.board.consume(claim, summary)
        except (AlreadyClaimed, JobNotFound):
            pass  # another waiter finalised it


def _is_manifest(value: Any) -> bool:
    """Whether ``value`` is a plan record as ``post_plan`` writes it (an ordinary job's is not)."""
    tasks = value.get("tasks") if isinstance(value, dict) else None
    return (isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(tasks, dict)
            and all(isinstance(spec, dict) and {"id", "handler", "after"} <= spec.keys() for spec in tasks.values()))
