"""Plain, immutable job-board data: no I/O happens in here."""

from __future__ import annotations

import enum
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

When = datetime | float | int
"""A point in time for a delayed post: an aware ``datetime``, or seconds since the epoch."""

INTERNAL_PREFIX = "jobboard."
"""Jobs whose names start with this are the library's own (plan gates and records):
``claim_next`` and ``wait`` never offer them unless asked for them by name."""


def wanted(name: str, names: Collection[str] | None) -> bool:
    """Whether a job called ``name`` is offered to a claimer asking for ``names``."""
    if names is None:
        return not name.startswith(INTERNAL_PREFIX)
    return name in names


_Made = TypeVar("_Made")


def positional_constructor(cls: type[_Made]) -> Callable[..., _Made]:
    """A constructor of the frozen slots dataclass ``cls`` taking every field positionally, in field order, no
    defaults: the instance ``cls(...)`` makes, at about half the cost (each slot set through its descriptor,
    not ``object.__setattr__`` by name): for the per-job hot paths. ``cls`` must have no ``__post_init__``."""
    names = [each.name for each in fields(cls)]  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or getattr(cls, "__slots__", None) is None:
        raise TypeError(f"{cls.__name__} needs slots and no __post_init__")
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope |= {f"set_{index}": vars(cls)[name].__set__ for index, name in enumerate(names)}
    arguments = ", ".join(f"a{index}" for index in range(len(names)))
    body = "".join(f"    set_{index}(made, a{index})\n" for index in range(len(names)))
    source = f"def make({arguments}):\n    made = new(cls)\n{body}    return made\n"
    exec(source, scope)  # noqa: S102 - generated code, as dataclasses makes __init__
    constructor: Callable[..., _Made] = scope["make"]
    constructor.__qualname__ = constructor.__name__ = f"new_{cls.__name__.lower()}"
    return constructor


def frozen_init(cls: type[Any]) -> Callable[..., None]:
    """An ``__init__`` for the frozen slots dataclass ``cls`` taking the arguments its own takes (same names,
    order and defaults) at under half the cost (a ``NewJob`` per job posted: 18.5k -> 6k instructions): the
    instance's class is swapped to a twin, a plain class with the same slots, for plain attribute stores,
    then back (same layout: Python allows it; the instance is not shared yet). A subclass's instance (another
    layout, maybe) has each slot set through its descriptor instead (10.5k).

    :raises TypeError: ``cls`` has a ``__post_init__``, slots other than its fields in order, or a field with a
        default factory or outside ``__init__``.
    """
    every = fields(cls)
    names = tuple(each.name for each in every)
    if (hasattr(cls, "__post_init__") or tuple(getattr(cls, "__slots__", ())) != names
            or any(not each.init or each.default_factory is not MISSING for each in every)):
        raise TypeError(f"{cls.__name__} needs its fields as its slots, plain defaults and no __post_init__")
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": names})
    scope: dict[str, Any] = {"cls": cls, "twin": twin, "set_class": object.__setattr__}
    parameters = ["self"]
    for index, each in enumerate(every):
        scope[f"set_{index}"] = vars(cls)[each.name].__set__
        parameters.append(each.name if each.default is MISSING else f"{each.name}=default_{index}")
        if each.default is not MISSING:
            scope[f"default_{index}"] = each.default
    slow = "".join(f"        set_{index}(self, {name})\n" for index, name in enumerate(names))
    fast = "".join(f"    self.{name} = {name}\n" for name in names)
    exec(f"def __init__({', '.join(parameters)}):\n    if type(self) is not cls:\n{slow}        return\n"  # noqa: S102
         f"    set_class(self, '__class__', twin)\n{fast}    self.__class__ = cls\n", scope)
    made: Callable[..., None] = scope["__init__"]
    original = vars(cls)["__init__"]
    made.__qualname__, made.__doc__ = original.__qualname__, original.__doc__
    made.__annotations__ = dict(original.__annotations__)
    probe = object.__new__(cls)
    object.__setattr__(probe, "__class__", twin)  # a layout Python refuses to swap raises TypeError here
    return made


MAX_TRACEBACK_BYTES = 4096
"""A :class:`LastError`'s traceback is cut to this many bytes (its end kept: the raise)."""


@dataclass(frozen=True, slots=True)
class LastError:
    """The error of a job's last failed attempt, stored with the job when it is abandoned or trashed."""

    type: str
    """The exception's class name, e.g. ``ValueError``."""
    message: str
    traceback: str = ""
    """The formatted traceback, at most :data:`MAX_TRACEBACK_BYTES` (its start cut off)."""
    attempt: int = 0
    at: float = 0.0
    """Wall-clock time of the failure (seconds since the epoch)."""

    @classmethod
    def from_exception(cls, error: BaseException, attempt: int, at: float | None = None) -> LastError:
        """Describe ``error`` (message cut to 1 000 characters, traceback to 4 KB)."""
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(type(error).__name__, str(error)[:1000], cut_traceback(text), attempt,
                   time.time() if at is None else at)

    def summary_line(self) -> str:
        """``Type: message`` on one line (the message cut to 500 characters)."""
        message = " ".join(self.message.split())
        return f"{self.type}: {message[:500]}" if message else self.type

    def summary(self) -> str:
        """``Type: message (attempt N)`` on one line."""
        message = " ".join(self.message.split())
        return f"{self.type}: {message} (attempt {self.attempt})" if message else f"{self.type} (attempt {self.attempt})"


def cut_traceback(text: str, limit: int = MAX_TRACEBACK_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, keeping its end (where the error was raised)."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    marker = "[cut]\n"
    return marker + raw[len(raw) - limit + len(marker):].decode("utf-8", "ignore")


class Priority(enum.IntEnum):
    """How urgent a job is. Higher values are handed out first."""

    VERY_LOW = -2
    LOW = -1
    NORMAL = 0
    HIGH = 1
    VERY_HIGH = 2

    @classmethod
    def parse(cls, value: Priority | int | str) -> Priority:
        """Accept a member, its integer value or its (case-insensitive) name.

        :raises ValueError: naming the accepted values.
        """
        try:
            if isinstance(value, str):
                return cls[value.strip().upper().replace("-", "_")]
            return cls(value)
        except (KeyError, ValueError):
            names = ", ".join(member.name.lower() for member in cls)
            raise ValueError(f"unknown priority {value!r}; use one of {names}") from None

    @property
    def rank(self) -> int:
        """0 for the most urgent priority, 4 for the least: sorts ascending."""
        return 2 - int(self)  # VERY_HIGH's value minus this one's (``.value`` costs 6 times more)


class JobState(enum.Enum):
    """Where a job stands. Backends derive it from what they store."""

    UNCLAIMED = "unclaimed"
    """On the board; claimable unless it is delayed (``retry_after``, or a delayed post not due yet)."""
    CLAIMED = "claimed"
    """Owned by one claimer, which alone may settle it."""
    WAITING = "waiting"
    """A linked job whose dependencies are not all consumed yet."""
    COMPLETE = "complete"
    """Consumed (or no longer on the board nor in the trash)."""
    TRASHED = "trashed"
    """Removed from the board and kept in the trash with a reason."""


@dataclass(frozen=True, slots=True)
class Progress:
    """What a running job last reported of itself (``JobContext.progress``), kept with its claim."""

    fraction: float
    """From 0.0 (started) to 1.0 (done)."""
    note: str = ""
    at: float = 0.0
    """Wall-clock time of the report (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one job as the board saw it when it was read.

    ``attempts`` and ``not_before`` change on the board after the snapshot was
    taken; re-read the job (``board.get``) for fresh values.
    """

    id: str
    """Unique on its board, assigned by the board at post; opaque to callers."""
    name: str
    """What to do (a handler name); not unique."""
    details: Mapping[str, Any] = field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    sequence: int = 0
    """Posting order on this board: lower was posted earlier."""
    created_at: float = 0.0
    """Wall-clock time of the post (seconds since the epoch)."""
    depends_on: tuple[str, ...] = ()
    """Ids of the jobs that must be consumed before this one is claimable."""
    max_attempts: int | None = None
    """How many times the job may be handed out; ``None`` means no limit."""
    attempts: int = 0
    """How many times the job has been claimed so far."""
    not_before: float | None = None
    """Wall-clock time before which the job is not claimable (``retry_after``, ``post(delay=...)``)."""
    keep_result: bool = False
    """Whether the board keeps the consume result for ``wait_for_completion``."""
    key: str | None = None
    """The idempotency key the job was posted with (see ``JobBoard.post``)."""
    last_error: LastError | None = None
    """The error of the last failed attempt, when a worker abandoned or trashed the job with one."""
    result_ttl: float | None = None
    """Seconds its kept result stays after the consume (``None``: the board's ``result_ttl``; 0: forever)."""
    trash_ttl: float | None = None
    """Seconds it stays in the trash (``None``: the board's ``trash_ttl``; 0: forever)."""
    progress: Progress | None = None
    """What the current claim's handler last reported (``None`` when not claimed or nothing reported)."""
    trace_context: Mapping[str, str] | None = field(default=None, repr=False)
    """The producer's trace context (W3C ``traceparent``), when it posted inside a span (see docs/metrics.md)."""
    group: str | None = None
    """The flow-control group it was posted in (``post(..., group=)``), whose limit bounds its claims."""

    def sort_key(self) -> tuple[int, int]:
        """The board order: higher priority first, then posting order."""
        return (self.priority.rank, self.sequence)


@dataclass(frozen=True, slots=True)
class ListedJob:
    """A job as listed, with where it stood and who owned it when the listing read it."""

    job: Job
    state: JobState
    """``UNCLAIMED``, ``CLAIMED`` or ``WAITING``: a listed job is on the board."""
    owner: str | None = None
    """The owner of its claim when ``CLAIMED``, else ``None``."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The capability to settle one job: proof of ownership at one generation.

    A claim goes stale when the job is settled, released (its owner's board
    closed or its session was lost) or claimed again; settling a stale claim
    raises :class:`~jobboard.errors.ClaimLost`.
    """

    job: Job
    owner: str
    generation: int
    """Fencing token: strictly increases with every claim of the job."""
    dependency_results: tuple[Any, ...] = ()
    """Results of ``job.depends_on``, in that order."""

    @property
    def attempt(self) -> int:
        """Which attempt this claim is (1 for the first claim of the job)."""
        return self.job.attempts


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended: consumed (``COMPLETE``) or ``TRASHED``."""

    job_id: str
    state: JobState
    result: Any = None
    """The consume result, when the job was posted with ``keep_result=True``."""
    reason: str | None = None
    """Why the job was trashed."""


@dataclass(frozen=True, slots=True)
class TrashedJob:
    """A job in the trash, with the reason it was put there."""

    job: Job
    reason: str
    trashed_at: float


@dataclass(frozen=True, slots=True)
class Entity:
    """A live participant (usually a worker), registered by a board."""

    name: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
