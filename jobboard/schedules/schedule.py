"""Periodic jobs, the pure part: a :class:`Schedule` and which period is due when. No I/O here.

A schedule fires at a sequence of times: every ``every`` seconds (counted from the epoch, so
every process computes the same times), or at the times of a cron expression (through
``croniter``: ``pip install jobboard[cron]``; imported only for cron schedules). Each firing is a
*period*, named by a key (:meth:`Schedule.period_key`); the scheduler posts the period's job with
that idempotency key, so however many schedulers race, each period is posted once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobboard.board.checks import check_details, check_name
from jobboard.errors import InvalidJob
from jobboard.job import INTERNAL_PREFIX, Priority

CATCH_UP = ("skip", "once")
"""``skip``: a period is posted only within ``grace`` of its time (a period nobody was up for is
skipped). ``once``: the latest period is posted however late (up to the board's key retention),
so after an outage the missed periods run once, together."""
MAX_GRACE = 60.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
RECORD = f"{INTERNAL_PREFIX}schedule"
"""The name of the internal jobs that store schedules on a board."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job to post periodically. Validated on creation (:class:`~jobboard.errors.InvalidJob`)."""

    name: str
    """Unique on its board: letters, digits and ``_.:-``, at most 100 characters."""
    job: str
    """The name of the job posted each period (a handler name)."""
    every: float | None = None
    """Seconds between periods (exactly one of ``every`` and ``cron``)."""
    cron: str | None = None
    """A cron expression (5 fields, UTC), e.g. ``"*/5 * * * *"``; needs ``jobboard[cron]``."""
    details: Mapping[str, Any] = field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    catch_up: str = "skip"
    """What happens to periods missed while no scheduler ran: see :data:`CATCH_UP`."""
    grace: float | None = None
    """With ``skip``: how late (seconds) a period may still be posted; default half a period, at most 60 s."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise InvalidJob(f"schedule name {self.name!r}: use 1-100 letters, digits or _.:- (starting with "
                             "a letter or digit)")
        check_name(self.job)
        object.__setattr__(self, "details", check_details(self.job, self.details))
        try:
            object.__setattr__(self, "priority", Priority.parse(self.priority))
        except ValueError as error:
            raise InvalidJob(f"schedule {self.name}: {error}") from None
        if (self.every is None) == (self.cron is None):
            raise InvalidJob(f"schedule {self.name}: give exactly one of every (seconds) and cron")
        if self.every is not None and not _positive(self.every):
            raise InvalidJob(f"schedule {self.name}: every must be a positive number of seconds, not {self.every!r}")
        if self.cron is not None:
            cron_times(self.cron, 0.0)  # raises InvalidJob for a bad expression
        if self.catch_up not in CATCH_UP:
            raise InvalidJob(f"schedule {self.name}: catch_up must be one of {', '.join(CATCH_UP)}, "
                             f"not {self.catch_up!r}")
        if self.grace is not None and not _positive(self.grace):
            raise InvalidJob(f"schedule {self.name}: grace must be a positive number of seconds")

    # -- periods -------------------------------------------------------------

    def latest(self, now: float) -> tuple[float, float]:
        """The latest period due at ``now``: its time and the time of the next period."""
        if self.every is not None:
            index = math.floor(now / self.every)
            return index * self.every, (index + 1) * self.every
        return cron_times(self.cron or "", now)

    def period_key(self, at: float) -> str:
        """The idempotency key of the period due at ``at`` (the same in every process)."""
        if self.every is not None:
            return f"{RECORD}:{self.name}:{round(at / self.every)}"
        return f"{RECORD}:{self.name}:{round(at)}"

    def due(self, now: float, retention: float) -> float | None:
        """The time of the period to post at ``now`` under the catch-up policy, or ``None``.

        :param retention: the board's key retention: a period is never posted later than
            this after its time (a later post could no longer find the first one).
        """
        at, following = self.latest(now)
        late = now - at
        window = self.grace_period(following - at) if self.catch_up == "skip" else math.inf
        return at if late <= min(window, retention * 0.9) else None

    def grace_period(self, period: float) -> float:
        return self.grace if self.grace is not None else min(period / 2, MAX_GRACE)

    # -- storage -------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """The schedule as the details of its record job."""
        return {"name": self.name, "job": self.job, "every": self.every, "cron": self.cron,
                "details": dict(self.details), "priority": int(self.priority), "catch_up": self.catch_up,
                "grace": self.grace}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Schedule:
        """:raises InvalidJob: the record is not a valid schedule."""
        try:
            return cls(name=record["name"], job=record["job"], every=record.get("every"), cron=record.get("cron"),
                       details=record.get("details") or {}, priority=record.get("priority", 0),
                       catch_up=record.get("catch_up", "skip"), grace=record.get("grace"))
        except (KeyError, TypeError) as error:
            raise InvalidJob(f"not a schedule record: {error!r}") from None

    def describe(self) -> str:
        """``every 30s`` or ``cron */5 * * * *``."""
        return f"every {self.every:g}s" if self.every is not None else f"cron {self.cron}"


def _positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def cron_times(expression: str, now: float) -> tuple[float, float]:
    """The latest time of ``expression`` (UTC) at or before ``now``, and the next one after it.

    :raises InvalidJob: croniter is not installed, or the expression is not valid (one line).
    """
    try:
        from croniter import croniter  # type: ignore[import-untyped]  # an optional extra
    except ImportError:
        raise InvalidJob("cron schedules need croniter: pip install 'jobboard[cron]'") from None
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise InvalidJob(f"bad cron expression {expression!r}: expected 5 fields (minute hour day month weekday)")
    start = datetime.fromtimestamp(now, UTC)
    try:
        croniter(expression, start)  # its errors say what is wrong
        if not croniter.is_valid(expression):
            raise ValueError("not a valid cron expression")
        previous = croniter(expression, start + timedelta(microseconds=1)).get_prev(float)  # now included
        following = croniter(expression, start).get_next(float)
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidJob(f"bad cron expression {expression!r}: {' '.join(str(error).split())}") from None
    return float(previous), float(following)
