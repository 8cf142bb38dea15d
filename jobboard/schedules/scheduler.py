"""Periodic jobs on a board: schedules stored on the board, and the scheduler that posts them.

Storage: each schedule is an internal job named :data:`~jobboard.schedules.schedule.RECORD` whose details
are the schedule, posted with priority ``VERY_HIGH`` so that it lists first (a reader stops at
the first job of a lower priority). Workers never claim it (internal name). Adding a schedule
with a name in use replaces it; removing one cancels its record (it goes to the trash). This
uses only ``post``, ``iterjobs`` and ``cancel``: it works on every backend, unchanged.

Posting: any number of :class:`Scheduler` instances (one per worker with ``scheduler=True``)
post each due period's job with the period's idempotency key, so the first post makes the job
and every other one finds it: each period is posted once, with no single scheduler to fail.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BoardClosed, InvalidJob, JobBoardError, JobNotFound
from jobboard.job import Job, Priority
from jobboard.schedules.schedule import RECORD, Schedule

logger = logging.getLogger("jobboard.schedules.scheduler")

REFRESH = 10.0
"""Seconds between two readings of the schedules by a running scheduler."""
MAX_BACKOFF = 5.0


async def schedule_records(board: JobBoard) -> list[tuple[Job, Schedule]]:
    """Every stored schedule with its record job, oldest record first; bad records are skipped (logged)."""
    found: list[tuple[Job, Schedule]] = []
    async for job in board.iterjobs():
        if job.priority is not Priority.VERY_HIGH:
            break  # records list first: nothing after this is one
        if job.name != RECORD:
            continue
        try:
            found.append((job, Schedule.from_record(job.details)))
        except InvalidJob as error:
            logger.warning("%s: skipping schedule record %s: %s", board.url, job.id, error)
    return sorted(found, key=lambda item: item[0].sequence)


async def list_schedules(board: JobBoard) -> list[Schedule]:
    """The schedules stored on ``board``, by name (of two records with one name, the newer wins)."""
    latest = {schedule.name: schedule for _, schedule in await schedule_records(board)}
    return [latest[name] for name in sorted(latest)]


async def add_schedule(board: JobBoard, schedule: Schedule) -> Job:
    """Store ``schedule`` on ``board`` (replacing the one with its name); returns its record job.

    :raises InvalidJob: the board's ``key_retention`` is too short to post each period once.
    """
    window = schedule.grace_period(_period(schedule))
    if board.key_retention * 0.9 < window:
        raise InvalidJob(f"schedule {schedule.name}: the board's key_retention ({board.key_retention:g}s) is "
                         f"too short to post each period once; it must exceed {window / 0.9:g}s")
    record = await board.post(RECORD, schedule.to_record(), priority=Priority.VERY_HIGH)
    for job, older in await schedule_records(board):
        if older.name == schedule.name and job.sequence < record.sequence:
            await _cancel(board, job, f"schedule {schedule.name} replaced")
    return record


async def remove_schedule(board: JobBoard, name: str) -> int:
    """Remove the schedule called ``name``; returns how many records were removed (0: none)."""
    removed = 0
    for job, schedule in await schedule_records(board):
        if schedule.name == name:
            removed += await _cancel(board, job, f"schedule {name} removed")
    return removed


async def _cancel(board: JobBoard, job: Job, reason: str) -> int:
    try:
        await board.cancel(job, reason)
    except JobNotFound:
        return 0  # removed meanwhile by another process
    return 1


def _period(schedule: Schedule) -> float:
    at, following = schedule.latest(time.time())
    return following - at


class Scheduler:
    """Posts the due periods of a board's schedules; run as many as you like (see the module docstring).

    :param refresh: seconds between readings of the stored schedules.
    :param clock: wall-clock seconds since the epoch (a test may pass its own).
    """

    def __init__(self, board: JobBoard, *, refresh: float = REFRESH,
                 clock: Callable[[], float] = time.time) -> None:
        self.board, self.refresh, self.clock = board, refresh, clock
        self.schedules: list[Schedule] = []
        self._posted: dict[str, float] = {}
        """The last period each schedule was posted for by this scheduler (it is not posted again)."""
        self.posts = 0
        """Posts sent (a post that found its period's job already there counts too)."""

    async def reload(self) -> list[Schedule]:
        self.schedules = await list_schedules(self.board)
        return self.schedules

    async def tick(self, now: float | None = None) -> list[Job]:
        """Post the period due now of every schedule (once per period per scheduler); returns the jobs.

        :raises JobBoardError: as ``post`` (the periods not posted yet are posted by the next tick).
        """
        now = self.clock() if now is None else now
        jobs = []
        for schedule in self.schedules:
            at = schedule.due(now, self.board.key_retention)
            if at is None or self._posted.get(schedule.name) == at:
                continue
            self.posts += 1
            jobs.append(await self.board.post(schedule.job, schedule.details, priority=schedule.priority,
                                              key=schedule.period_key(at)))
            self._posted[schedule.name] = at
        return jobs

    def next_wakeup(self, now: float) -> float:
        """Seconds until the next period of any schedule (at most ``refresh``)."""
        soonest = min((schedule.latest(now)[1] for schedule in self.schedules), default=math.inf)
        return max(0.0, min(soonest - now, self.refresh))

    async def run(self) -> None:
        """Reload and tick forever. Backend errors are logged and retried with back-off, never raised.

        Returns when the board is closed.
        """
        failures, reloaded = 0, -math.inf
        while True:
            try:
                if self.clock() - reloaded >= self.refresh:
                    await self.reload()
                    reloaded = self.clock()
                await self.tick()
                failures = 0
            except BoardClosed:
                return
            except Exception as error:  # a scheduler never stops its worker: log, back off, retry
                failures += 1
                delay = min(0.1 * 2 ** min(failures, 10), MAX_BACKOFF)
                level = logging.WARNING if isinstance(error, JobBoardError) else logging.ERROR
                logger.log(level, "%s: scheduler: %s (retrying in %.1fs)", self.board.url, error, delay,
                           exc_info=not isinstance(error, JobBoardError))
                await anyio.sleep(delay)
                continue
            await anyio.sleep(self.next_wakeup(self.clock()))


async def run_scheduler(board: JobBoard, *, refresh: float = REFRESH) -> None:
    """Run a :class:`Scheduler` on ``board`` until the board closes (what a worker with ``scheduler=True`` does)."""
    await Scheduler(board, refresh=refresh).run()
