"""Flow control: the records of limits per group and of pauses, their checks, and the rules a backend keeps.

A job may carry a **group** (``post(..., group="tenant-42")``). A :class:`LimitSpec` stored on the board
bounds the claims of its group; a pause stops new claims of a job name or of the whole board. Both
are read by every board on the same storage: they hold fleet-wide.

What a backend implementing flow control guarantees (:mod:`jobboard.backend` names the operations):

- **One atomic step.** The limit check and the claim are one step on the server (one transaction,
  one script, one multi): no two claimers both take a group's last permit, and a pause or limit
  written before a claim begins is honoured by it.
- **A permit is a claim.** ``running`` of a group is the number of live claims on its jobs; nothing
  else is counted. A permit returns whenever its claim ends (consume, abandon, trash, cancel, its
  board closed, its session or lease lost), by the same write that ends the claim: it cannot leak,
  and cannot be granted twice (the claim's fencing already forbids two live claims of one job).
- **Concurrency.** A job of a group with ``concurrency=N`` is claimable only while fewer than ``N``
  jobs of the group are claimed (``0`` holds the group).
- **Sequence.** A job of a group with ``sequence=True`` is claimable only when every job of its group
  posted before it (lower ``Job.sequence``) has left the board, consumed or trashed (or cancelled): the
  group runs one job at a time in posting order, whatever the priorities. A trashed job does not stop
  the sequence: the next one runs (it is in the trash for an operator; ``requeue`` puts it back at
  its place, ahead of the group's later jobs). A job waiting for dependencies, or delayed, at the head
  holds its group until it runs.
- **Rate.** At most ``count`` claims of the group in any window of ``period`` seconds (a sliding
  window log: the times of the last ``count`` grants are kept, and a claim is granted only when the
  oldest of them is ``period`` old). Chosen over a token bucket because a bucket of ``count`` tokens
  admits up to ``2 * count`` claims in one period (a full bucket, then its refill); a payment API's
  "20 calls a second" is a window bound. It is counted on the server with the claim it allows
  (the backend's clock, never the callers'): every claim counts, a repeated one too.
- **Pause.** No new claim of a paused name (or of any job while the board is paused); running jobs
  finish. ``resume`` lifts it. Both hold for every board within a second of returning.
- **claim_next** skips a job held back and takes the best job not held back (priority, then posting
  order, across groups: no round-robin between groups, because that order is one index scan on every
  backend; a concurrency limit is how a busy group leaves workers to the others). ``claim(job)``
  of a held-back job raises :class:`~jobboard.errors.HeldBack` naming why, and for a rate its
  ``retry_after``.
- **wait** returns only jobs not held back, and when the only ones are held back by a rate it wakes
  when the next permit is due (from the window it keeps), so a worker sleeps until then instead of
  polling; it also wakes when a permit returns, a limit changes or is cleared, or a pause is lifted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from jobboard.board.checks import check_group
from jobboard.errors import InvalidJob

MAX_RATE_COUNT = 10_000
"""The largest ``count`` of a rate: a backend keeps the times of the last ``count`` grants of a group."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` claims in any window of ``period`` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        return f"{self.count}/{_period_text(self.period)}"


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """A group's limit, checked (:func:`limit_spec`): what ``set_limit`` hands a backend. Any of the three
    may be given; each that is holds."""

    group: str
    concurrency: int | None = None
    """At most this many claimed jobs of the group at once (``None``: no bound; 0 holds the group)."""
    sequence: bool = False
    """One job at a time, in posting order."""
    rate: Rate | None = None

    def describe(self) -> str:
        """One line: ``concurrency 2, sequence, rate 20/s``."""
        parts = [] if self.concurrency is None else [f"concurrency {self.concurrency}"]
        parts += ["sequence"] if self.sequence else []
        parts += [] if self.rate is None else [f"rate {self.rate}"]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class GroupLimit:
    """A group's limit as ``board.limits()`` lists it, with the live figures read with it."""

    group: str
    concurrency: int | None
    sequence: bool
    rate: Rate | None
    running: int
    """Jobs of the group claimed now (the permits in use)."""
    waiting: int
    """Jobs of the group on the board and not claimed (held back, delayed or about to run; not those still
    waiting for dependencies)."""

    @classmethod
    def of(cls, limit: LimitSpec, running: int, waiting: int) -> GroupLimit:
        return cls(limit.group, limit.concurrency, limit.sequence, limit.rate, running, waiting)

    @property
    def spec(self) -> LimitSpec:
        return LimitSpec(self.group, self.concurrency, self.sequence, self.rate)

    def to_json(self) -> dict[str, Any]:
        """``{"group", "concurrency", "sequence", "rate": {"count", "period"} or None, "running", "waiting"}``."""
        return {"group": self.group, "concurrency": self.concurrency, "sequence": self.sequence,
                "rate": None if self.rate is None else {"count": self.rate.count, "period": self.rate.period},
                "running": self.running, "waiting": self.waiting}


@dataclass(frozen=True, slots=True)
class Paused:
    """What is paused: the whole board, and job names."""

    board: bool = False
    names: frozenset[str] = frozenset()

    def covers(self, name: str) -> bool:
        """Whether a job called ``name`` is held back by a pause."""
        return self.board or name in self.names

    def to_json(self) -> dict[str, Any]:
        """``{"board": bool, "names": [sorted]}``."""
        return {"board": self.board, "names": sorted(self.names)}


def limit_spec(group: object, concurrency: object = None, sequence: object = False, rate: object = None) -> LimitSpec:
    """``set_limit``'s arguments, checked. ``rate``: a :class:`Rate`, ``(count, period_seconds)`` or text
    (``"20/s"``, :func:`parse_rate`).

    :raises InvalidJob: one line naming the bad argument (nothing given, a negative concurrency, a
        sequence with a concurrency above 1, a rate out of bounds).
    """
    name = check_group(group)
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 0):
        raise InvalidJob(f"group {name!r}: concurrency must be an integer >= 0 or None, not {concurrency!r}")
    if not isinstance(sequence, bool):
        raise InvalidJob(f"group {name!r}: sequence must be True or False, not {sequence!r}")
    if sequence and concurrency is not None and concurrency > 1:
        raise InvalidJob(f"group {name!r}: a sequence runs one job at a time; concurrency {concurrency} contradicts it")
    checked = None if rate is None else check_rate(rate, f"group {name!r}: rate")
    if concurrency is None and not sequence and checked is None:
        raise InvalidJob(f"group {name!r}: give concurrency, sequence or rate (clear_limit removes a limit)")
    return LimitSpec(name, concurrency, sequence, checked)


def check_rate(rate: object, what: str = "rate") -> Rate:
    """:raises InvalidJob: unless a :class:`Rate`, ``(count, period)`` with 1 <= count <= 10 000 and a finite
    period > 0, or text :func:`parse_rate` reads."""
    if isinstance(rate, str):
        return parse_rate(rate, what)
    count, period = (rate.count, rate.period) if isinstance(rate, Rate) else _pair(rate, what)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RATE_COUNT:
        raise InvalidJob(f"{what}: the count must be an integer from 1 to {MAX_RATE_COUNT}, not {count!r}")
    if isinstance(period, bool) or not isinstance(period, int | float) or not 0 < period < math.inf:
        raise InvalidJob(f"{what}: the period must be a finite number of seconds > 0, not {period!r}")
    return Rate(count, float(period))


def _pair(rate: object, what: str) -> tuple[Any, Any]:
    if not isinstance(rate, tuple | list) or len(rate) != 2:
        raise InvalidJob(f"{what} must be (count, period_seconds), a Rate or text like '20/s', not {rate!r}")
    return rate[0], rate[1]


_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RATE_TEXT = re.compile(r"\s*(\d+)\s*/\s*(\d*\.?\d*)\s*(s|sec|m|min|h)\s*")


def parse_rate(text: str, what: str = "rate") -> Rate:
    """``"20/s"``, ``"100/m"``, ``"5/h"``, ``"3/2.5s"`` (count / [number] unit).

    :raises InvalidJob: ``rate must look like 20/s, 100/m, 5/h or 3/2.5s, not 'abc'``.
    """
    match = _RATE_TEXT.fullmatch(text)
    if match is None:
        raise InvalidJob(f"{what} must look like 20/s, 100/m, 5/h or 3/2.5s, not {text!r}")
    count, number, unit = match.groups()
    try:
        period = (float(number) if number else 1.0) * _UNITS[unit]
    except ValueError:
        raise InvalidJob(f"{what} must look like 20/s, 100/m, 5/h or 3/2.5s, not {text!r}") from None
    return check_rate((int(count), period), what)


def _period_text(period: float) -> str:
    for unit, seconds in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if period == seconds:
            return unit
    return f"{period:g}s"


def limit_record(limit: LimitSpec) -> dict[str, Any]:
    """How a limit is stored by a backend that keeps it as one msgpack map (one place)."""
    record: dict[str, Any] = {"group": limit.group, "concurrency": limit.concurrency, "sequence": limit.sequence}
    if limit.rate is not None:
        record["rate"] = [limit.rate.count, limit.rate.period]
    return record


def limit_from(record: Any) -> LimitSpec:
    """The :class:`LimitSpec` of a stored map. :raises TypeError, KeyError, ValueError: not one."""
    if not isinstance(record, dict):
        raise TypeError("a limit must be a map")
    rate = record.get("rate")
    concurrency = record.get("concurrency")
    try:
        return LimitSpec(str(record["group"]), None if concurrency is None else int(concurrency),
                         bool(record.get("sequence", False)),
                         None if rate is None else Rate(int(rate[0]), float(rate[1])))
    except OverflowError as error:  # an infinite count: no board writes one
        raise ValueError(f"a limit's number out of range: {error}") from error
