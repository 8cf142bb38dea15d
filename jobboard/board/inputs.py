"""What callers hand the board, and its checks: job references, :class:`NewJob`, lifetimes,
progress, ages and owners. Shared by the contract (:mod:`jobboard.board.contract`) and the backends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobboard.board.checks import seconds
from jobboard.errors import InvalidJob
from jobboard.job import Job, Priority, Progress, When

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


MAX_NOTE_LENGTH = 500


def check_progress(fraction: object, note: object, at: float) -> Progress:
    """The :class:`Progress` to store. :raises InvalidJob: ``fraction`` not in 0..1 or ``note`` not a string."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise InvalidJob(f"progress must be a number from 0 to 1, not {fraction!r}")
    if not isinstance(note, str):
        raise InvalidJob(f"a progress note must be a string, not {type(note).__name__}")
    return Progress(float(fraction), note[:MAX_NOTE_LENGTH], at)


def check_age(older_than: object) -> float:
    """:raises InvalidJob: unless ``older_than`` is a finite number of seconds >= 0."""
    return seconds(older_than, "older_than")


def check_owner(owner: object) -> str:
    """:raises InvalidJob: unless ``owner`` is a non-empty string."""
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidJob(f"owner must be a non-empty string, not {owner!r}")
    return owner
