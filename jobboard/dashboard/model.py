"""What the dashboard shows, read from one :class:`~jobboard.observe.live.LiveBoard` (no web framework here).

:class:`Dashboard` follows the view's :meth:`~jobboard.observe.live.LiveBoard.updates` once for the whole
process: it remembers how jobs ended (for plans and job pages), the plans it saw posted, the
malformed entries the board reported, and the last events. Reading the board (``get``, the trash,
a state) happens only for pages that need more than the view holds, and only as they are served.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import anyio

from jobboard.board.codec import MalformedEntry
from jobboard.board.contract import JobBoard
from jobboard.board.events import EventKind
from jobboard.cli.jobs_results import Found
from jobboard.errors import BackendUnavailable, JobBoardError, JobNotFound
from jobboard.job import JobState, ListedJob, Priority, TrashedJob
from jobboard.observe.live import LiveBoard
from jobboard.observe.stats import BoardStats
from jobboard.plans.posting import RECORD, PlanStatus, _is_manifest

FINISHED_KEPT = 200_000
"""How many ended jobs the dashboard remembers (their end state and reason)."""
TRASH_SHOWN = 500
PLAN_SCAN = 0.25
PLANS_KEPT = 200
"""How many plans the plans page lists (the newest)."""
RESULT_WAIT = 2.0
ENDED = {EventKind.CONSUMED: JobState.COMPLETE, EventKind.TRASHED: JobState.TRASHED}


@dataclass(frozen=True, slots=True)
class Options:
    """How the dashboard was started."""

    allow_actions: bool = False
    token: str | None = None
    page_size: int = 50


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The jobs page's query: empty strings match everything; ``page`` counts from 1."""

    state: str = ""
    name: str = ""
    priority: str = ""
    owner: str = ""
    page: int = 1

    def matches(self, item: ListedJob) -> bool:
        job = item.job
        return ((not self.state or item.state.value == self.state)
                and (not self.name or self.name in job.name)
                and (not self.priority or Priority(job.priority).name.lower() == self.priority)
                and (not self.owner or self.owner in (item.owner or "")))


@dataclass(frozen=True, slots=True)
class JobsPage:
    items: list[ListedJob]
    total: int
    page: int
    pages: int


@dataclass(frozen=True, slots=True)
class JobView(Found):
    """Everything the job page shows: what the board knows of the id (as ``jobboard show`` finds it; ``job`` is
    ``None`` when only the end of the job is known), and the page's own findings."""

    has_result: bool = False
    dependents: tuple[ListedJob, ...] = ()
    malformed: str | None = None
    """Why the board cannot read this entry, when it is not a valid posting."""
    stale: bool = False
    """Shown from the live view as last seen: the board is unreachable."""


@dataclass
class PlanView:
    plan_id: str
    name: str
    manifest: dict[str, Any]
    status: PlanStatus
    ids: dict[str, str] = field(default_factory=dict)


class Dashboard:
    """The shared state of one dashboard process; :meth:`run` follows the live view."""

    def __init__(self, live: LiveBoard, options: Options | None = None) -> None:
        self.live, self.options = live, options or Options()
        self.board: JobBoard = live.board
        self.started = time.time()
        self.finished: OrderedDict[str, tuple[JobState, str]] = OrderedDict()
        self.plans: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.malformed: deque[tuple[float, str, str]] = deque(maxlen=100)
        self.malformed_ids: dict[str, str] = {}
        self.recent: deque[tuple[float, str, str, str]] = deque(maxlen=30)
        self._stats: tuple[int, BoardStats | None] = (-1, None)
        self._names: tuple[int, list[str]] = (-1, [])

    async def run(self) -> None:
        """Follow the view until cancelled (one subscription to the view, none to the board)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._note_plans_on_change)
            await self._follow_updates()

    async def _note_plans_on_change(self) -> None:
        """Note the plans posted (at most every :data:`PLAN_SCAN` seconds), so ended ones stay listed."""
        version = -1
        while True:
            version = await self.live.changed(version)
            self._note_plans()
            await anyio.sleep(PLAN_SCAN)

    async def _follow_updates(self) -> None:
        async with self.live.updates(maxlen=100_000) as stream:
            async for event in stream:
                now = time.time()
                if event.kind in ENDED and event.job_id:
                    self.finished[event.job_id] = (ENDED[event.kind], event.detail)
                    if len(self.finished) > FINISHED_KEPT:
                        self.finished.popitem(last=False)
                elif event.kind is EventKind.MALFORMED:
                    self.malformed.appendleft((now, event.job_id or "", event.detail))
                    if event.job_id:
                        self.malformed_ids[event.job_id] = event.detail
                self.recent.appendleft((now, event.kind.value, event.job_id or "", event.detail))

    # -- figures ---------------------------------------------------------------

    def stats(self) -> BoardStats:
        """The view's figures, computed once per version."""
        version, stats = self._stats
        if stats is None or version != self.live.version:
            stats = self.live.stats()
            self._stats = (self.live.version, stats)
        return stats

    def jobs_page(self, query: JobFilter) -> JobsPage:
        """One page of the jobs matching ``query``, in board order."""
        matching = [item for item in self.live.jobs() if query.matches(item)]
        size = self.options.page_size
        pages = max(1, -(-len(matching) // size))
        page = min(max(1, query.page), pages)
        return JobsPage(matching[(page - 1) * size: page * size], len(matching), page, pages)

    def names(self) -> list[str]:
        """The job names on the board (from the view's list: cheaper than its figures)."""
        version, names = self._names
        if version != self.live.version:
            names = sorted({item.job.name for item in self.live.jobs()})
            self._names = (self.live.version, names)
        return names

    # -- one job ---------------------------------------------------------------

    async def job_view(self, job_id: str) -> JobView | None:
        """The job on the board, in the trash, or ended; ``None`` if the board never had it.

        While the live view is unhealthy no board read is tried (it would wait out the backend's
        connect timeout): the job as last seen, marked stale, or :class:`BackendUnavailable` at once.
        """
        dependents = tuple(item for item in self.live.jobs() if job_id in item.job.depends_on)
        listed, stale = self.live.job(job_id), not self.live.healthy
        if listed is not None:
            return JobView(job_id, listed.state, listed.job, listed.owner, dependents=dependents, stale=stale)
        if job_id in self.malformed_ids:
            return JobView(job_id, JobState.UNCLAIMED, malformed=self.malformed_ids[job_id] or "not a valid posting")
        if stale and job_id in self.finished:
            state, detail = self.finished[job_id]
            return JobView(job_id, state, reason=detail or None, dependents=dependents, stale=True)
        if stale:
            raise BackendUnavailable(f"the board is unreachable (reconnecting) and job {job_id} "
                                     "is not in the last known state")
        try:
            job = await self.board.get(job_id)
        except MalformedEntry as error:
            return JobView(job_id, JobState.UNCLAIMED, malformed=str(error))
        except JobNotFound:
            pass
        else:
            state = await self.board.state(job)
            owner = await self.board.owner(job) if state is JobState.CLAIMED else None
            return JobView(job_id, state, job, owner, dependents=dependents)
        async for trashed in self.board.trashed():
            if trashed.job.id == job_id:
                return JobView(job_id, JobState.TRASHED, trashed.job, reason=trashed.reason,
                               trashed_at=trashed.trashed_at, dependents=dependents)
        return await self._ended_view(job_id, dependents)

    async def _ended_view(self, job_id: str, dependents: tuple[ListedJob, ...]) -> JobView | None:
        ended = self.finished.get(job_id)
        if ended is None and await self.board.state(job_id) is not JobState.COMPLETE:
            return None
        result, has_result = None, False
        with anyio.move_on_after(RESULT_WAIT):
            outcome = await self.board.wait_for_completion(job_id)
            result, has_result = outcome.result, outcome.result is not None
        return JobView(job_id, JobState.COMPLETE, result=result, has_result=has_result, dependents=dependents,
                       reason=ended[1] if ended else None)

    async def trash(self, limit: int = TRASH_SHOWN) -> list[TrashedJob]:
        """The newest ``limit`` jobs in the trash, newest first."""
        entries = [entry async for entry in self.board.trashed()]
        entries.sort(key=lambda entry: entry.trashed_at, reverse=True)
        return entries[:limit]

    # -- plans -------------------------------------------------------------------

    def _note_plans(self) -> None:
        for item in self.live.jobs():
            if item.job.name == RECORD and item.job.id not in self.plans and _is_manifest(item.job.details):
                self._keep_plan(item.job.id, dict(item.job.details))

    def _keep_plan(self, plan_id: str, manifest: dict[str, Any]) -> None:
        self.plans[plan_id] = manifest
        while len(self.plans) > PLANS_KEPT:
            self.plans.popitem(last=False)

    def plan_ids(self) -> list[str]:
        """Plans on the board now and those seen since the dashboard started, newest first."""
        self._note_plans()
        return list(reversed(self.plans))

    async def plan_view(self, plan_id: str) -> PlanView | None:
        """Where every task of the plan stands; ``None`` if it is no plan the board knows."""
        self._note_plans()
        manifest = self.plans.get(plan_id)
        if manifest is None:
            manifest = await self._finished_manifest(plan_id)
            if manifest is None:
                return None
            self._keep_plan(plan_id, manifest)
        ids = {name: spec["id"] for name, spec in manifest["tasks"].items()}
        states: dict[str, JobState] = {}
        owners: dict[str, str] = {}
        for name, job_id in ids.items():
            states[name], owner = await self._task_state(job_id)
            if owner:
                owners[name] = owner
        trashed = {ids[name] for name, state in states.items() if state is JobState.TRASHED}
        if unknown := [job_id for job_id in trashed if job_id not in self.finished]:
            await self._note_trash_reasons(set(unknown))
        reasons = {name: self.finished[job_id][1] for name, job_id in ids.items()
                   if job_id in trashed and job_id in self.finished}
        status = PlanStatus(plan_id, str(manifest["name"]), dict(sorted(states.items())), owners, reasons)
        return PlanView(plan_id, status.name, manifest, status, ids)

    async def _task_state(self, job_id: str) -> tuple[JobState, str | None]:
        listed = self.live.job(job_id)
        if listed is not None:
            return listed.state, listed.owner
        ended = self.finished.get(job_id)
        if ended is not None:
            return ended[0], None
        state = await self.board.state(job_id)
        if state is JobState.CLAIMED:
            return state, await self.board.owner(job_id)
        if state is JobState.COMPLETE:
            self.finished[job_id] = (state, "")
        return state, None

    async def _note_trash_reasons(self, job_ids: set[str]) -> None:
        """Remember why these jobs (trashed before the dashboard started) were trashed: one trash read."""
        async for entry in self.board.trashed():
            if entry.job.id in job_ids:
                self.finished[entry.job.id] = (JobState.TRASHED, entry.reason)

    async def _finished_manifest(self, plan_id: str) -> dict[str, Any] | None:
        """The manifest a finished plan keeps as its record's result (``None`` if it has none)."""
        try:
            if await self.board.state(plan_id) is not JobState.COMPLETE:
                return None
            with anyio.move_on_after(RESULT_WAIT):
                result = (await self.board.wait_for_completion(plan_id)).result
                return dict(result) if _is_manifest(result) else None
        except JobBoardError:
            return None
        return None

