"""A board's figures: jobs by state, name and priority, oldest claimable age, trash, workers.

:func:`summarize` is pure (no I/O); :func:`read_stats` reads a board once to feed it;
:class:`jobboard.observe.live.LiveBoard` feeds it from a live view instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobboard.board.contract import JobBoard
from jobboard.job import INTERNAL_PREFIX, Entity, JobState, ListedJob, Priority

ON_BOARD = (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING)


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A live entity (usually a worker) and the jobs its claims hold."""

    name: str
    metadata: Mapping[str, Any]
    running: tuple[tuple[str, str, float | None], ...] = ()
    """``(job id, job name, claimed at)`` for each job it owns; ``claimed at`` is ``None``
    when the claim is older than the view that saw it."""


@dataclass(frozen=True, slots=True)
class BoardStats:
    """What is on a board at one moment."""

    at: float
    """Wall-clock time the figures were computed."""
    by_state: Mapping[str, int]
    """``unclaimed``, ``claimed`` and ``waiting`` (all three present) -> job count."""
    by_name: Mapping[str, Mapping[str, int]]
    """Job name -> state value -> count."""
    by_priority: Mapping[str, int]
    """Priority name (lower case) -> count of jobs on the board."""
    oldest_unclaimed_age: float | None
    """Seconds since the oldest claimable job (unclaimed and due) was posted; ``None`` if none."""
    trash_size: int
    workers: tuple[WorkerView, ...]
    records: int = 0
    """The library's own records on the board (plans, schedules: names starting with ``jobboard.``).
    They wait, unclaimed, for as long as what they describe, so no other figure counts them."""

    @property
    def total(self) -> int:
        """Jobs on the board (unclaimed, claimed and waiting)."""
        return sum(self.by_state.values())

    def to_json(self) -> dict[str, Any]:
        """A plain JSON-able dict (no infinities or NaNs)."""
        age = self.oldest_unclaimed_age
        return {
            "at": self.at, "total": self.total, "by_state": dict(self.by_state),
            "by_name": {name: dict(counts) for name, counts in self.by_name.items()},
            "by_priority": dict(self.by_priority),
            "oldest_unclaimed_age": age if age is not None and math.isfinite(age) else None,
            "trash_size": self.trash_size, "records": self.records,
            "workers": [{"name": w.name, "metadata": dict(w.metadata),
                         "running": [{"id": job, "name": name, "claimed_at": at} for job, name, at in w.running]}
                        for w in self.workers],
        }


def summarize(jobs: Iterable[ListedJob], trash_size: int, entities: Sequence[Entity], *,
              now: float | None = None, claimed_at: Mapping[str, float] | None = None) -> BoardStats:
    """The figures of ``jobs`` (listed jobs), the trash size and the live entities; the library's
    records (see :attr:`BoardStats.records`) are only counted."""
    now = time.time() if now is None else now
    by_state = {state.value: 0 for state in ON_BOARD}
    by_name: dict[str, dict[str, int]] = {}
    by_priority: dict[str, int] = {}
    oldest: float | None = None
    running: dict[str, list[tuple[str, str, float | None]]] = {}
    records = 0
    for item in jobs:
        job, state = item.job, item.state.value
        if job.name.startswith(INTERNAL_PREFIX):
            records += 1
            continue
        by_state[state] = by_state.get(state, 0) + 1
        counts = by_name.setdefault(job.name, {})
        counts[state] = counts.get(state, 0) + 1
        priority = Priority(job.priority).name.lower()
        by_priority[priority] = by_priority.get(priority, 0) + 1
        if item.state is JobState.UNCLAIMED and (job.not_before is None or job.not_before <= now):
            oldest = job.created_at if oldest is None else min(oldest, job.created_at)
        if item.owner is not None:
            since = claimed_at.get(job.id) if claimed_at else None
            running.setdefault(item.owner, []).append((job.id, job.name, since))
    workers = tuple(WorkerView(entity.name, entity.metadata, tuple(running.get(entity.name, ())))
                    for entity in sorted(entities, key=lambda entity: entity.name))
    return BoardStats(now, by_state, by_name, by_priority,
                      None if oldest is None else max(0.0, now - oldest), trash_size, workers, records)


async def read_stats(board: JobBoard) -> BoardStats:
    """The board's figures, read once: its listing, its trash and its entities (no read per job)."""
    jobs = [item async for item in board.listing()]
    trash_size = 0
    async for _ in board.trashed():
        trash_size += 1
    return summarize(jobs, trash_size, await board.entities())
