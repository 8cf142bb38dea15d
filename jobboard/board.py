"""The :class:`JobBoard` contract: what every backend promises.

Ownership in one paragraph: ``claim`` hands a job to exactly one owner and
returns a :class:`~jobboard.job.Claim`. Only that claim settles the job
(``consume``, ``abandon`` or ``trash``), and only while it is current: once the
job is settled, released or claimed again, the claim is stale and settling it
raises :class:`~jobboard.errors.ClaimLost`. Claims die with the board that made
them (``aclose``, or a lost backend session), never silently.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from jobboard import board_inputs
from jobboard.backend import Prepared, Settle, SettleAction
from jobboard.board_inputs import JobRef, NewJob, check_owner, job_id_of
from jobboard.board_keeping import TrashAndProgress
from jobboard.board_reading import BoardReading
from jobboard.board_watching import BoardWatching
from jobboard.checks import check_result_size, check_retry_after, check_size
from jobboard.codec import Posting, build_posting, encode_posting, encode_value
from jobboard.delay import due_time
from jobboard.errors import BoardClosed, DependencyMissing, InvalidJob
from jobboard.events import Event, EventHub, EventKind
from jobboard.job import (
    Claim,
    Job,
    LastError,
    Priority,
    When,
)
from jobboard.propagation import with_trace_context

logger = logging.getLogger(__name__)

__all__ = ["JobBoard", "JobRef", "NewJob", "check_owner", "job_id_of"]


class JobBoard(BoardReading, BoardWatching, TrashAndProgress):
    """An async job board. Use it as ``async with open_board(url) as board``.

    Lifecycle, posting, claiming and settling are here; reads are in
    :class:`~jobboard.board_reading.BoardReading`, waiting, events and entities in
    :class:`~jobboard.board_watching.BoardWatching`, progress and the trash in
    :class:`~jobboard.board_keeping.TrashAndProgress`.

    Every method raises :class:`~jobboard.errors.BoardClosed` before ``open``
    and after ``aclose``, and :class:`~jobboard.errors.BackendUnavailable` on a
    transient backend failure: the operation may or may not have happened, and
    repeating the same call finds out (a settle repeated after it returns
    normally if the first one was applied). A write whose outcome can no longer
    be told raises :class:`~jobboard.errors.UnknownOutcome` instead (never for a
    keyed post within its retention, see ``post``); a conflict retrying cannot
    fix raises :class:`~jobboard.errors.BoardConflict` naming it. No exception
    of a backend's client library ever escapes: everything is a ``JobBoardError``.
    """

    max_posting_bytes: int = 1024 * 1024
    """Largest encoded posting (name + details + options) the backend accepts."""
    default_max_attempts: int | None = None
    """``max_attempts`` for posts that give none (a URL option of the backends)."""
    key_retention: float = 86400.0
    """Seconds a settled job's idempotency key keeps finding it (URL option ``key_retention``)."""
    result_ttl: float = board_inputs.DEFAULT_RESULT_TTL
    """Seconds a kept result stays after the consume; 0: forever (URL option ``result_ttl``)."""
    trash_ttl: float = board_inputs.DEFAULT_TRASH_TTL
    """Seconds a job stays in the trash; 0: forever (URL option ``trash_ttl``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._open = False
        self.hub = EventHub()
        """The board's event fan-out: the backend publishes, :meth:`events` subscribes."""
        self._reported: set[str] = set()
        """Malformed entries already reported (each is reported once per board)."""

    def _report_malformed(self, job_id: str, what: str = "not a valid posting") -> None:
        """Skip-and-report, for backends: log ``job_id`` once and publish one ``MALFORMED`` event."""
        if job_id not in self._reported:
            self._reported.add(job_id)
            logger.warning("skipping malformed entry %s on %s", job_id, self.url)
            self.hub.publish(Event(EventKind.MALFORMED, job_id, what))

    @property
    def is_open(self) -> bool:
        return self._open

    def _ensure_open(self) -> None:
        if not self._open:
            raise BoardClosed(f"board {self.url} is not open")

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and prepare the board's storage (created if missing)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release every claim and entity this board holds, end event streams, disconnect.

        Idempotent. Claims released this way go back on the board (their
        attempt stays counted).
        """

    # -- producing ---------------------------------------------------------

    async def post(
        self,
        name: str,
        details: Mapping[str, Any] | None = None,
        *,
        priority: Priority | int | str = Priority.NORMAL,
        depends_on: Sequence[JobRef] = (),
        max_attempts: int | None = None,
        keep_result: bool = False,
        key: str | None = None,
        delay: float | None = None,
        not_before: When | None = None,
        result_ttl: float | None = None,
        trash_ttl: float | None = None,
    ) -> Job:
        """Put a new job on the board, atomically: it is fully there or not at all.

        After ``post`` returns, ``iterjobs`` on this board shows the job. A job
        with ``depends_on`` is ``WAITING`` until every dependency is consumed;
        it becomes claimable atomically with the last dependency's consume.

        Exactly once: a post whose reply is lost is resolved by the backend, never
        written twice. If it cannot be resolved, ``post`` raises (see below).

        :param max_attempts: times the job may be handed out (default: the board's).
        :param keep_result: keep the consume result for ``wait_for_completion``.
        :param key: an idempotency key. While a job posted with this key is on
            the board, or was settled (consumed, trashed, cancelled) less than
            :attr:`key_retention` seconds ago, ``post`` writes nothing and returns
            that job (as it was posted, or as it was when settled). Concurrent
            posts with one key make exactly one job.
        :param delay: seconds from now before the job is claimable (a delayed post).
        :param not_before: the same as an absolute time: an aware ``datetime``
            or epoch seconds (a naive ``datetime`` is refused; a past time means
            at once). A delayed job is on the board and listed, ``UNCLAIMED``
            with ``not_before`` set; ``claim`` refuses it (``NotClaimable``),
            ``claim_next`` and ``wait`` pass over it until it is due, and
            ``wait`` wakes when it becomes due. Which clock decides is the
            backend's (see its docs). A linked job is claimable once its
            dependencies are consumed *and* it is due.
        :param result_ttl: seconds the kept result stays after the consume
            (default: the board's :attr:`result_ttl`; 0: forever).
        :param trash_ttl: seconds the job stays in the trash if it goes there
            (default: the board's :attr:`trash_ttl`; 0: forever).
        :raises InvalidJob: bad name, priority, key or options (both ``delay``
            and ``not_before``, a negative delay); details msgpack
            cannot encode (naming the key); a posting over
            :attr:`max_posting_bytes`; a dependency not on the board. Nothing
            is written in any of these cases.
        :raises BackendUnavailable: the backend could not be reached; with a
            ``key``, posting again is safe and finds the first post if it was written.
        :raises UnknownOutcome: the post was sent without a key and whether it
            was written can no longer be told (the backend was unreachable for
            longer than the backend's resolution window).
        """

        prepared = self._prepare_posting(name, details, priority, depends_on, max_attempts, keep_result, key,
                                         delay=delay, not_before=not_before, result_ttl=result_ttl,
                                         trash_ttl=trash_ttl)
        return await self._post(Prepared(*prepared))

    @abc.abstractmethod
    async def _post(self, prepared: Prepared) -> Job:
        """The backend's post of one checked, encoded posting (atomic, exactly once: see :meth:`post`).

        :raises DependencyMissing: a dependency is not on the board (nothing written).
        """

    async def post_many(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Post several jobs; returns them in the order given.

        Every posting's name, priority, options, details and size are checked
        before any is written: an ``InvalidJob`` (naming the index) writes
        nothing. Each job is then posted atomically and exactly once, as by
        :meth:`post`. A dependency that is not on the board is found then: the
        batch stops there with :class:`DependencyMissing`, whose ``index`` names
        the posting and whose ``posted`` holds the jobs written before it. The
        batch as a whole is not atomic: a backend failure part way leaves the
        first ones posted (give keys to repeat a batch safely). Backends may send
        the batch in fewer round trips.
        """
        return await self._post_many([Prepared(*prepared) for prepared in self._check_batch(jobs)])

    async def _post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """The backend's post of a checked batch, in order (default: :meth:`_post` one by one).

        :raises DependencyMissing: with ``index`` and ``posted`` (see :meth:`post_many`).
        """
        posted: list[Job] = []
        for index, prepared in enumerate(batch):
            try:
                posted.append(await self._post(prepared))
            except DependencyMissing as error:
                raise error.in_batch(index, posted) from None
        return posted

    def _check_batch(self, jobs: Sequence[NewJob]) -> list[tuple[Posting, bytes]]:
        """Prepare every posting of a batch (see :meth:`post_many`).

        :raises InvalidJob: naming the index of the first bad one.
        """
        self._ensure_open()
        prepared = []
        for index, job in enumerate(jobs):
            if not isinstance(job, NewJob):
                raise InvalidJob(f"jobs[{index}] is a {type(job).__name__}, not a NewJob")
            try:
                prepared.append(self._prepare_posting(job.name, job.details, job.priority, job.depends_on,
                                                      job.max_attempts, job.keep_result, job.key,
                                                      delay=job.delay, not_before=job.not_before,
                                                      result_ttl=job.result_ttl, trash_ttl=job.trash_ttl))
            except InvalidJob as error:
                raise InvalidJob(f"jobs[{index}]: {error}") from None
        return prepared

    def _prepare_posting(
        self, name: str, details: Mapping[str, Any] | None, priority: Priority | int | str,
        depends_on: Sequence[JobRef], max_attempts: int | None, keep_result: bool,
        key: str | None = None, *, delay: float | None = None, not_before: When | None = None,
        result_ttl: float | None = None, trash_ttl: float | None = None,
    ) -> tuple[Posting, bytes]:
        """For backends' ``post``: validate, apply the board's defaults, encode, check the size.

        :raises InvalidJob: as ``post`` documents.
        """
        self._ensure_open()
        now = time.time()
        due = due_time(name, delay, not_before, now)
        posting = build_posting(
            name, details, priority=priority, depends_on=[job_id_of(d) for d in depends_on],
            max_attempts=self.default_max_attempts if max_attempts is None else max_attempts,
            keep_result=keep_result, created_at=now, key=key, result_ttl=result_ttl, trash_ttl=trash_ttl,
        )
        if due is not None:
            posting = posting.delayed(due)
        raw = encode_posting(posting)
        check_size(name, raw, self.max_posting_bytes)
        return with_trace_context(posting, raw, self.max_posting_bytes)


    # -- claiming and settling ---------------------------------------------

    @abc.abstractmethod
    async def claim(self, job: JobRef, owner: str) -> Claim:
        """Take ownership of one job. Atomic: of concurrent claimers exactly one wins.

        Counts an attempt and returns a claim whose generation is higher than
        any earlier claim of the job. A job that has used up ``max_attempts``
        is moved to the trash ("max attempts exceeded") instead.

        Cancelling a claim (a timeout, a shutdown) after its request went out
        leaves no job claimed by no one: a claim it made is released in the
        background (so it does ``claim_next`` and ``consume_and_claim_next``).

        :raises AlreadyClaimed: another owner holds the job.
        :raises NotClaimable: the job is waiting for dependencies or delayed.
        :raises JobNotFound: the job is not on the board (or was just trashed
            for exceeding its attempts).
        """

    @abc.abstractmethod
    async def claim_next(self, owner: str, *, names: Collection[str] | None = None) -> Claim | None:
        """Claim the best claimable job (priority, then age), or return ``None`` if none.

        Never raises for contention: a job lost to another claimer is skipped.

        :param names: only jobs with one of these names (a worker's handlers).
            Without it, every job except the library's internal ones
            (names starting with ``jobboard.``).
        """

    async def consume_and_claim_next(
        self, claim: Claim, result: Any = None, *, names: Collection[str] | None = None,
    ) -> Claim | None:
        """Consume ``claim`` (as :meth:`consume`), then claim the next job for the same owner
        (as :meth:`claim_next` with ``names``): a worker's free slot takes its next job.

        The consume is complete before the claim is tried. Backends may do both in
        one round trip. Raises what ``consume`` raises, and then claims nothing.
        """
        await self.consume(claim, result)
        return await self.claim_next(claim.owner, names=names)

    @abc.abstractmethod
    async def watch_claim(self, claim: Claim) -> str:
        """Wait until ``claim`` stops being current and return why.

        Returns at once for a stale claim. A claim stops being current when it
        is settled (through any board), released (its board closed, its session
        expired) or the job is claimed again. A worker runs this beside the
        handler and cancels the handler when it returns.
        """

    async def consume(self, claim: Claim, result: Any = None) -> None:
        """Mark the job done and remove it, atomically with releasing its dependents.

        ``result`` goes to every dependent job (and to ``wait_for_completion``
        when the job was posted with ``keep_result``).

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        :raises InvalidJob: msgpack cannot encode ``result``, or it is over :attr:`max_posting_bytes`.
        """
        self._ensure_open()
        encoded = self._encoded_result(claim, result)
        await self._settle(claim, Settle(SettleAction.CONSUME, result=result, encoded_result=encoded))

    def _encoded_result(self, claim: Claim, result: Any) -> bytes:
        """``result`` encoded for ``claim``'s consume. :raises InvalidJob: not encodable, or over the size limit."""
        encoded = encode_value(result, what=f"result of job {claim.job.id}")
        check_result_size(claim.job.id, encoded, self.max_posting_bytes)
        return encoded

    async def abandon(
        self, claim: Claim, *, retry_after: float | None = None, error: LastError | None = None,
    ) -> None:
        """Put the job back on the board, unclaimable for ``retry_after`` seconds.

        ``error`` (why the attempt failed) becomes the job's ``last_error``, in
        the same atomic write as the release.

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        :raises InvalidJob: ``retry_after`` is not a finite number of seconds >= 0.
        """
        self._ensure_open()
        await self._settle(claim, Settle(SettleAction.ABANDON, retry_after=check_retry_after(retry_after) or None,
                                         error=error))

    async def trash(self, claim: Claim, reason: str, *, error: LastError | None = None) -> None:
        """Remove the job to the trash with ``reason``; its dependents follow it there.

        ``error`` is kept as the trashed job's ``last_error``.

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        """
        self._ensure_open()
        await self._settle(claim, Settle(SettleAction.TRASH, reason=str(reason), error=error))

    @abc.abstractmethod
    async def _settle(self, claim: Claim, settle: Settle) -> None:
        """The backend's settle of ``claim``: one atomic write, fenced by the claim's generation and owner.

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        """

    @abc.abstractmethod
    async def cancel(self, job: JobRef, reason: str) -> None:
        """Move a job to the trash with ``reason``, with its dependents, whoever holds it.

        Atomic, like ``trash``. A claimed job's claim is revoked in the same
        write: its owner's ``watch_claim`` returns (a worker cancels the
        handler) and settling that claim raises ``ClaimLost``.

        :raises JobNotFound: the job is not on the board.
        """
