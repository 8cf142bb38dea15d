"""Delayed posts: when a job posted with ``delay`` or ``not_before`` becomes claimable.

No I/O here. A due time is wall-clock seconds since the epoch, like
:attr:`jobboard.job.Job.not_before`.
"""

from __future__ import annotations

import math
from datetime import datetime

from jobboard.board.checks import seconds
from jobboard.errors import InvalidJob
from jobboard.job import When


def due_time(name: str, delay: float | None, not_before: When | None, now: float) -> float | None:
    """The wall-clock time before which a new job is not claimable, or ``None`` (claimable at once).

    ``delay`` counts seconds from ``now``; ``not_before`` is absolute: an aware
    ``datetime`` or epoch seconds. A naive ``datetime`` is refused (its time zone
    would be a guess). A due time already past, and ``delay=0``, mean "at once".

    :raises InvalidJob: both given, a negative or non-finite delay, a naive
        datetime, or a ``not_before`` of another type.
    """
    if delay is not None and not_before is not None:
        raise InvalidJob(f"job {name!r}: give delay or not_before, not both")
    if delay is not None:
        delay = seconds(delay, f"job {name!r}: delay")
        return now + delay if delay > 0 else None
    if not_before is None:
        return None
    if isinstance(not_before, datetime):
        if not_before.tzinfo is None or not_before.utcoffset() is None:
            raise InvalidJob(f"job {name!r}: not_before must be a timezone-aware datetime "
                             "(e.g. datetime.now(timezone.utc)), not a naive one")
        due = not_before.timestamp()
    elif isinstance(not_before, int | float) and not isinstance(not_before, bool) and math.isfinite(not_before):
        due = float(not_before)
    else:
        raise InvalidJob(f"job {name!r}: not_before must be an aware datetime or epoch seconds, not {not_before!r}")
    return due if due > now else None
