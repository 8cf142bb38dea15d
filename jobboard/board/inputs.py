"""What callers hand the board: job references and :class:`NewJob`, and the default lifetimes. Shared by
the contract (:mod:`jobboard.board.contract`) and the backends; the checks are :mod:`jobboard.board.checks`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobboard.job import Job, Priority, When, frozen_init

DEFAULT_RESULT_TTL = 7 * 86400.0
"""A kept result stays 7 days unless the board URL or the post says otherwise."""
DEFAULT_TRASH_TTL = 30 * 86400.0
"""A trashed job stays 30 days unless the board URL or the post says otherwise."""

JobRef = Job | str
"""A job or its id."""


def job_id_of(job: JobRef) -> str:
    """The id of a job reference."""
    return job if isinstance(job, str) else job.id


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job for :meth:`JobBoard.post_many`: the arguments of :meth:`JobBoard.post`."""

    name: str
    details: Mapping[str, Any] | None = None
    priority: Priority | int | str = Priority.NORMAL
    depends_on: Sequence[JobRef] = ()
    max_attempts: int | None = None
    keep_result: bool = False
    key: str | None = None
    delay: float | None = None
    not_before: When | None = None
    result_ttl: float | None = None
    trash_ttl: float | None = None
    group: str | None = None


setattr(NewJob, "__init__", frozen_init(NewJob))  # noqa: B010 - the same __init__ at half the cost (one per job)
