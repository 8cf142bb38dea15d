"""The backend interface: what a backend author writes, and what the board hands it.

:class:`~jobboard.board.contract.JobBoard` is one concrete class over a :class:`Backend`. The board checks
that it is open, checks and defaults a caller's input, encodes it, owns the event hub, ``events()``,
malformed-entry reporting and background tasks (:class:`BoardServices`), and makes one call to its
backend. A post reaches the backend as a :class:`Prepared` (``post`` / ``post_many``); consume,
abandon and trash as one :class:`Settle` with an action (``settle``), as the worker and the
distributed backends think of them. A backend does the I/O: it never sees a posting that was not
checked, a result that msgpack cannot carry or that is over the board's size limit, a negative
``retry_after``, an empty owner, a job reference that is not an id, or a call on a closed board.

A backend registers in the entry-point group ``jobboard.backends`` under its URL scheme, naming its
:class:`Backend` subclass (constructed with the URL). The in-tree backends register the same way.
What a backend author needs is importable from this module: the requests, the errors it raises, the records of
:mod:`jobboard.job`, the stored formats of :mod:`jobboard.board.codec`, the events and the URL helpers.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobboard.board.codec import (
    MalformedEntry,
    Posting,
    decode_posting,
    decode_value,
    encode_posting,
    encode_value,
    last_error_from,
    last_error_record,
    progress_from,
    progress_record,
)
from jobboard.board.events import Event, EventHub, EventKind
from jobboard.board.inputs import DEFAULT_RESULT_TTL, DEFAULT_TRASH_TTL
from jobboard.board.limits import GroupLimit, LimitSpec, Paused, Rate, limit_from, limit_record
from jobboard.board.services import BoardServices
from jobboard.board.url import (
    COMMON_OPTIONS,
    BoardURL,
    board_name,
    non_negative_float,
    parse_options,
    parse_url,
    positive_float,
    positive_int,
)
from jobboard.errors import (
    AlreadyClaimed,
    BackendUnavailable,
    BoardClosed,
    BoardConflict,
    ClaimLost,
    DependencyMissing,
    HeldBack,
    InvalidJob,
    JobBoardError,
    JobNotFound,
    NotClaimable,
    NotOwner,
    UnknownOutcome,
    Unsupported,
)
from jobboard.job import (
    INTERNAL_PREFIX,
    Claim,
    Entity,
    Job,
    JobState,
    LastError,
    ListedJob,
    Outcome,
    Progress,
    TrashedJob,
    wanted,
)

__all__ = [
    "COMMON_OPTIONS", "INTERNAL_PREFIX", "AlreadyClaimed", "Backend", "BackendUnavailable", "BoardConflict",
    "BoardServices", "BoardURL", "Claim", "ClaimLost", "DependencyMissing", "Entity", "Event", "EventKind",
    "GroupLimit", "HeldBack", "InvalidJob", "Job", "JobBoardError", "JobNotFound", "JobState", "LastError",
    "LimitSpec", "ListedJob", "MalformedEntry", "NotClaimable", "NotOwner", "Outcome", "Paused", "Posting",
    "Prepared", "Progress", "Rate", "Settle", "SettleAction", "TrashedJob", "UnknownOutcome", "Unsupported",
    "board_name", "decode_posting", "decode_value", "encode_posting", "encode_value", "last_error_from",
    "last_error_record", "limit_from", "limit_record", "non_negative_float", "parse_options", "parse_url",
    "positive_float", "positive_int", "progress_from", "progress_record", "wanted",
]

@dataclass(slots=True)
class Prepared:
    """One post: the posting after the board's defaults (with its trace context), its stored bytes (within
    ``max_posting_bytes``). Read-only for a backend (not frozen: that costs twice as much, on every post)."""

    posting: Posting
    raw: bytes
    connection: Any = None
    """The caller's own open database connection to write in (``post(..., connection=)``), or ``None``.
    A backend that cannot write in a caller's transaction raises ``Unsupported`` when it is given."""

    @property
    def group(self) -> str | None:
        """The job's flow-control group (checked), stored in ``raw`` with the rest of the posting."""
        return self.posting.group


class SettleAction(enum.Enum):
    """How a claim is settled."""

    CONSUME = "consume"
    """Done: the job is removed, its result delivered to its dependents (and kept if asked)."""
    ABANDON = "abandon"
    """Back on the board, claimable again after ``retry_after`` seconds."""
    TRASH = "trash"
    """To the trash with ``reason``, its dependents with it."""


@dataclass(slots=True)
class Settle:
    """One settle of a claim, checked and encoded by the board (read-only for a backend: not frozen only
    because a frozen dataclass costs 1.1 us to build against 0.6, a tenth of memory://'s whole settle).

    Atomic in every backend: the claim's generation and owner are checked in the same write that changes
    the job (:class:`~jobboard.errors.ClaimLost`, :class:`~jobboard.errors.NotOwner` otherwise: no change)."""

    action: SettleAction
    result: Any = None
    """``CONSUME``: the handler's result, as given."""
    encoded_result: bytes = b"\xc0"
    """``CONSUME``: ``result`` encoded (msgpack), within the board's size limit."""
    retry_after: float | None = None
    """``ABANDON``: seconds (finite, > 0) before the job is claimable again; ``None``: at once."""
    reason: str = ""
    """``TRASH``: why (kept with the trashed job)."""
    error: LastError | None = None
    """``ABANDON`` and ``TRASH``: why the attempt failed, stored as the job's ``last_error``."""
    connection: Any = None
    """``CONSUME``: the caller's own open database connection to settle in (transactional completion), or
    ``None``; a backend that cannot raises ``Unsupported`` when it is given."""




class Backend(abc.ABC):
    """What a backend implements; :class:`~jobboard.board.contract.JobBoard` is the caller's face of it.

    Constructed with the board URL (options parsed and checked there: ``InvalidURL`` otherwise).
    Every method is called on an open backend only (the board checks), with checked input. The
    contract each method keeps is the :class:`~jobboard.board.contract.JobBoard` method of the same name:
    atomicity, fencing and errors are stated there once. Errors are ``JobBoardError`` subclasses
    only; a transient failure is ``BackendUnavailable``, never a client library's exception. Optional
    operations default to raising :class:`~jobboard.errors.Unsupported` (or to a loop of required ones).
    """

    max_posting_bytes: int = 1024 * 1024
    """Largest encoded posting (name + details + options) the backend accepts."""
    default_max_attempts: int | None = None
    """``max_attempts`` for posts that give none."""
    key_retention: float = 86400.0
    """Seconds a settled job's idempotency key keeps finding it."""
    result_ttl: float = DEFAULT_RESULT_TTL
    """Seconds a kept result stays after the consume; 0: forever."""
    trash_ttl: float = DEFAULT_TRASH_TTL
    """Seconds a job stays in the trash; 0: forever."""

    services: BoardServices
    """Set by the board (:meth:`bind`) before ``open``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._open = False

    def use_options(self, options: Mapping[str, Any] | Any) -> None:
        """Take the :data:`COMMON_OPTIONS` (``max_attempts``, ``max_posting_bytes``, ``key_retention``,
        ``result_ttl``, ``trash_ttl``) from parsed URL options: a mapping (absent keys keep the defaults) or an
        object with those attributes."""
        get = options.get if isinstance(options, Mapping) else (lambda key, default: getattr(options, key, default))
        self.default_max_attempts = get("max_attempts", self.default_max_attempts)
        self.max_posting_bytes = get("max_posting_bytes", self.max_posting_bytes)
        self.key_retention = get("key_retention", self.key_retention)
        self.result_ttl = get("result_ttl", self.result_ttl)
        self.trash_ttl = get("trash_ttl", self.trash_ttl)

    def bind(self, services: BoardServices) -> None:
        """Called once by the board that fronts this backend."""
        self.services = services

    @property
    def hub(self) -> EventHub:
        return self.services.hub

    def report_malformed(self, job_id: str, what: str = "not a valid posting") -> None:
        self.services.report_malformed(job_id, what)

    @property
    def is_open(self) -> bool:
        return self._open

    def ensure_open(self) -> None:
        """:raises BoardClosed: for a backend's own long calls that outlive an ``aclose``."""
        if not self._open:
            raise BoardClosed(f"board {self.url} is not open")

    # -- lifecycle ----------------------------------------------------------
    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and prepare the storage; set ``_open``."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release this board's claims and entities, close the hub's streams, disconnect. Idempotent."""

    # -- writes -------------------------------------------------------------
    @abc.abstractmethod
    async def post(self, prepared: Prepared) -> Job:
        """Write one checked, encoded posting (atomic, exactly once).
        :raises DependencyMissing: a dependency is not on the board (nothing written)."""

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """Write a checked batch in order (default: :meth:`post` one by one).
        :raises DependencyMissing: with ``index`` and ``posted``."""
        posted: list[Job] = []
        for index, prepared in enumerate(batch):
            try:
                posted.append(await self.post(prepared))
            except DependencyMissing as error:
                raise error.in_batch(index, posted) from None
        return posted

    @abc.abstractmethod
    async def claim(self, job_id: str, owner: str) -> Claim:
        """With flow control: :class:`HeldBack` for a held-back job, checked in the claim's atomic step."""

    @abc.abstractmethod
    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        """With flow control: the best job not held back, checked and claimed in one atomic step."""

    @abc.abstractmethod
    async def settle(self, claim: Claim, settle: Settle) -> None:
        """One atomic write, fenced by the claim's generation and owner (``ClaimLost`` / ``NotOwner``)."""

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """``settle`` (a consume), then ``claim_next`` for the claim's owner; backends may fuse them."""
        await self.settle(claim, settle)
        return await self.claim_next(claim.owner, names)

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        """Up to ``count`` claims, each as :meth:`claim_next`'s and in its order (default: it until none;
        cancelled midway, the claims made go back in the background; its skips count once: :meth:`passed_over`)."""
        claims: list[Claim] = []
        with self.services.counting_once():
            try:
                while len(claims) < count and (claim := await self.claim_next(owner, names)) is not None:
                    claims.append(claim)
            except BaseException:
                for made in claims:
                    self.services.spawn(self.release(made))
                raise
        return claims

    @abc.abstractmethod
    async def watch_claim(self, claim: Claim) -> str: ...

    @abc.abstractmethod
    async def cancel(self, job_id: str, reason: str) -> None: ...

    # -- reads --------------------------------------------------------------
    @abc.abstractmethod
    async def get(self, job_id: str) -> Job: ...

    @abc.abstractmethod
    def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]: ...

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        """Default: each job's state and owner read after it; override to read them together."""
        async for job in self.iterjobs(only_unclaimed):
            state = await self.state(job.id)
            if state in (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING):
                yield ListedJob(job, state, await self.owner(job.id) if state is JobState.CLAIMED else None)

    @abc.abstractmethod
    async def state(self, job_id: str) -> JobState: ...

    @abc.abstractmethod
    async def owner(self, job_id: str) -> str | None: ...

    @abc.abstractmethod
    async def job_count(self) -> int: ...

    @abc.abstractmethod
    def trashed(self) -> AsyncIterator[TrashedJob]: ...

    # -- waiting and entities -----------------------------------------------
    @abc.abstractmethod
    async def wait(self, names: Collection[str] | None) -> list[Job]: ...

    @abc.abstractmethod
    async def wait_for_completion(self, job_id: str) -> Outcome: ...

    def observed(self) -> None:  # noqa: B027 (a hook: most backends need nothing)
        """Someone subscribed to the events (a backend may then read more of them)."""

    @abc.abstractmethod
    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        """``metadata`` as given (a dict) and ``encoded`` (msgpack)."""

    @abc.abstractmethod
    async def unregister_entity(self, name: str) -> None: ...

    @abc.abstractmethod
    async def entities(self) -> list[Entity]: ...

    # -- optional -----------------------------------------------------------
    def could_be_job_id(self, job_id: str) -> bool:
        """No I/O. Default: every id but the empty one."""
        return job_id != ""

    async def never_posted(self, job_id: str) -> bool:
        return not self.could_be_job_id(job_id)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        raise Unsupported(f"{type(self).__name__} does not store progress")

    async def purge(self, older_than: float) -> int:
        raise Unsupported(f"{type(self).__name__} cannot purge its trash")

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        raise Unsupported(f"{type(self).__name__} cannot requeue from its trash")

    async def release(self, claim: Claim) -> None:
        """Give back a claim whose job never started (claim-ahead; nothing checks it did not), claimable at
        once, fenced as a settle, its attempt uncounted where overridden (default: an abandon, counted)."""
        await self.settle(claim, Settle(SettleAction.ABANDON))

    async def claim_lost(self, claim: Claim) -> str | None:
        """Why ``claim`` is not current (cancelled, session lost...), or ``None``: what the board knows, else a
        read. Default: state and owner (2 reads; a lost session's claim not yet released looks current)."""
        if (state := await self.state(claim.job.id)) is not JobState.CLAIMED:
            return str(state.value)
        return None if await self.owner(claim.job.id) == claim.owner else "claimed again"

    @property
    def releases_uncounted(self) -> bool:  # a wrapper says its inner's, as for the two below
        return type(self).release is not Backend.release

    @property
    def claims_many_at_once(self) -> bool:
        return type(self).claim_many is not Backend.claim_many

    # -- optional: flow control (the guarantees: jobboard.board.limits; all six, and every claim path) --
    @property
    def flow_control(self) -> bool:
        """Whether this backend implements flow control: it overrides :meth:`set_limit` (a wrapper says its inner's)."""
        return type(self).set_limit is not Backend.set_limit

    @property
    def reports_held_back(self) -> bool:
        """Whether the claims of ``claim_next``, ``claim_many``, ``consume_and_claim_next`` report what flow control
        made them pass over (:meth:`passed_over`; else ``JobBoard.held_back`` counts ``claim(job)``'s refusals)."""
        return False

    def passed_over(self, whys: Iterable[str]) -> None:
        """One claim call passed over jobs held back for ``whys`` (each ``HeldBack.why``): each counts once in
        ``JobBoard.held_back`` (in the interface's :meth:`claim_many`, once for its loop). No I/O; gated path only."""
        self.services.passed_over(whys)

    async def set_limit(self, limit: LimitSpec) -> None:
        """Store ``limit`` (replacing its group's) where every claim of every board reads it, atomically."""
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")

    async def clear_limit(self, group: str) -> bool:
        """Remove ``group``'s limit; whether there was one."""
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")

    async def limits(self) -> list[GroupLimit]:
        """Every limit, by group, each with its group's claimed (``running``) and unclaimed (``waiting``) jobs."""
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")

    async def pause(self, name: str | None) -> None:
        """Pause ``name`` (``None``: the board), fleet-wide."""
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")

    async def resume(self, name: str | None) -> None:
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")

    async def paused(self) -> Paused:
        raise Unsupported(f"{type(self).__name__} does not implement flow control (limits and pauses)")
