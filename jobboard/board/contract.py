"""The :class:`JobBoard` contract: what every board promises, over any backend.

Ownership in one paragraph: ``claim`` hands a job to exactly one owner and
returns a :class:`~jobboard.job.Claim`. Only that claim settles the job
(``consume``, ``abandon`` or ``trash``), and only while it is current: once the
job is settled, released or claimed again, the claim is stale and settling it
raises :class:`~jobboard.errors.ClaimLost`. Claims die with the board that made
them (``aclose``, or a lost backend session), never silently.

This module is the contract's one façade (mostly docstrings): each method checks that the board is
open, checks and encodes its input, and makes one call to the :class:`~jobboard.backend.Backend`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from jobboard.backend import Backend, BoardServices, Prepared, Settle, SettleAction
from jobboard.board.bulkfront import BulkFront
from jobboard.board.checks import (
    check_age,
    check_group,
    check_name,
    check_owner,
    check_progress,
    check_result_size,
    check_retry_after,
    check_size,
    due_time,
)
from jobboard.board.codec import build_posting, encode_posting, encode_value
from jobboard.board.events import DEFAULT_EVENT_BUFFER, EventHub, EventStream
from jobboard.board.inputs import JobRef, NewJob, job_id_of
from jobboard.board.limits import GroupLimit, Paused, Rate, limit_spec
from jobboard.board.propagation import OPENTELEMETRY_TRACE, with_trace_context
from jobboard.errors import BoardClosed, HeldBack, InvalidJob
from jobboard.job import (
    Claim,
    Entity,
    Job,
    JobState,
    LastError,
    ListedJob,
    Outcome,
    Priority,
    TrashedJob,
    When,
)

__all__ = ["JobBoard", "JobRef", "NewJob", "check_owner", "job_id_of"]


class JobBoard:
    """An async job board over a backend. Use it as ``async with open_board(url) as board``.

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

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        """What this board runs on (see :mod:`jobboard.backend`)."""
        self.url = backend.url
        backend.bind(BoardServices(backend.url))
        self.services = backend.services
        """The event hub, malformed-entry reporting and background tasks the board lends its backend
        (a backend wrapper shares its inner backend's)."""
        self.held_back: Counter[str] = self.services.held_back
        """Claims of this board that flow control refused or passed over, by ``why``: each :meth:`claim`
        raising :class:`HeldBack`, and each :meth:`claim_next` / :meth:`claim_many` / claim of
        :meth:`consume_and_claim_next` that passed over a job held back better in the claim order than the one
        it took (or any, taking none): once per call and ``why``, where the backend reports it
        (``backend.reports_held_back``). Counted in this process: no read."""

    def __repr__(self) -> str:
        return f"<JobBoard {self.url} over {type(self.backend).__name__}>"

    @property
    def hub(self) -> EventHub:
        """The board's event fan-out: the backend publishes, :meth:`events` subscribes."""
        return self.services.hub

    @property
    def max_posting_bytes(self) -> int:
        """Largest encoded posting (name + details + options) the backend accepts."""
        return self.backend.max_posting_bytes

    @property
    def default_max_attempts(self) -> int | None:
        """``max_attempts`` for posts that give none (a URL option of the backends)."""
        return self.backend.default_max_attempts

    @property
    def key_retention(self) -> float:
        """Seconds a settled job's idempotency key keeps finding it (URL option ``key_retention``)."""
        return self.backend.key_retention

    @property
    def result_ttl(self) -> float:
        """Seconds a kept result stays after the consume; 0: forever (URL option ``result_ttl``)."""
        return self.backend.result_ttl

    @property
    def trash_ttl(self) -> float:
        """Seconds a job stays in the trash; 0: forever (URL option ``trash_ttl``)."""
        return self.backend.trash_ttl

    @property
    def is_open(self) -> bool:
        return self.backend.is_open

    def _ensure_open(self) -> None:
        if not self.backend.is_open:
            raise BoardClosed(f"board {self.url} is not open")

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect and prepare the board's storage (created if missing)."""
        await self.backend.open()

    async def aclose(self) -> None:
        """Release every claim and entity this board holds, end event streams, disconnect.

        Idempotent. Claims released this way go back on the board (their
        attempt stays counted).
        """
        await self.backend.aclose()
        await self.services.cancel_tasks()

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
        connection: Any = None,
        group: str | None = None,
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
        :param connection: the application's own open database connection: the job is written in
            its transaction (it exists if and only if that transaction commits). Only backends on
            that database take it (postgresql://); others raise ``Unsupported``.
        :param group: the flow-control group (a non-empty string of at most 200 characters): its limit
            (:meth:`set_limit`) bounds the job's claims. Stored with the job (``Job.group``) on every
            backend, whether or not it implements limits.
        :raises InvalidJob: bad name, priority, key, group or options (both ``delay``
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
        self._ensure_open()
        return await self.backend.post(self._prepare(
            name, details, priority, depends_on, max_attempts, keep_result, key, delay, not_before,
            result_ttl, trash_ttl, connection, group, time.time()))

    async def post_many(self, jobs: Sequence[NewJob], *, connection: Any = None) -> list[Job]:
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
        self._ensure_open()
        batch, prepare, now = [], self._prepare, time.time()  # one clock reading: the batch is posted at one time
        plain = BulkFront(now, self.backend.default_max_attempts, self.backend.max_posting_bytes).prepare
        for index, job in enumerate(jobs):
            if not isinstance(job, NewJob):
                raise InvalidJob(f"jobs[{index}] is a {type(job).__name__}, not a NewJob")
            try:
                batch.append(plain(job, connection) or prepare(
                    job.name, job.details, job.priority, job.depends_on, job.max_attempts, job.keep_result,
                    job.key, job.delay, job.not_before, job.result_ttl, job.trash_ttl, connection, job.group, now))
            except InvalidJob as error:
                raise InvalidJob(f"jobs[{index}]: {error}") from None
        return await self.backend.post_many(batch)

    def _prepare(  # post's arguments, passed on: no NewJob is built per post (1-2 us)
        self, name: str, details: Mapping[str, Any] | None, priority: Priority | int | str,
        depends_on: Sequence[JobRef], max_attempts: int | None, keep_result: bool, key: str | None,
        delay: float | None, not_before: When | None, result_ttl: float | None, trash_ttl: float | None,
        connection: Any, group: str | None, now: float,
    ) -> Prepared:
        """Validate a posting, apply the board's defaults, encode, check the size (``now``: the post's time).

        :raises InvalidJob: as ``post`` documents.
        """
        backend = self.backend
        posting = build_posting(
            name, details, priority=priority, depends_on=depends_on,
            max_attempts=backend.default_max_attempts if max_attempts is None else max_attempts,
            keep_result=keep_result, created_at=now, key=key, result_ttl=result_ttl, trash_ttl=trash_ttl,
            group=group,
            not_before=None if delay is None and not_before is None else due_time(name, delay, not_before, now),
        )
        raw = encode_posting(posting)
        if len(raw) > backend.max_posting_bytes:
            check_size(name, raw, backend.max_posting_bytes)
        if OPENTELEMETRY_TRACE in sys.modules:  # else no span can be current: nothing to carry
            posting, raw = with_trace_context(posting, raw, backend.max_posting_bytes)
        return Prepared(posting, raw, connection)

    # -- claiming and settling ---------------------------------------------

    async def claim(self, job: JobRef, owner: str) -> Claim:
        """Take ownership of one job. Atomic: of concurrent claimers exactly one wins.

        Counts an attempt and returns a claim whose generation is higher than
        any earlier claim of the job. A job that has used up ``max_attempts``
        is moved to the trash ("max attempts exceeded") instead.

        Cancelling a claim (a timeout, a shutdown) after its request went out
        leaves no job claimed by no one: a claim it made is released in the
        background (so it does ``claim_next`` and ``consume_and_claim_next``).

        :raises AlreadyClaimed: another owner holds the job.
        :raises HeldBack: flow control holds it back (:meth:`set_limit`, :meth:`pause`): its name or
            the board is paused, or its group is at its concurrency limit, earlier jobs of its
            sequence are on the board, or its rate is used up (``retry_after``: when the next permit is due).
        :raises NotClaimable: the job is waiting for dependencies or delayed.
        :raises JobNotFound: the job is not on the board (or was just trashed
            for exceeding its attempts).
        """
        self._ensure_open()
        try:
            return await self.backend.claim(job_id_of(job), check_owner(owner))
        except HeldBack as held:
            self.held_back[held.why] += 1
            raise

    async def claim_next(self, owner: str, *, names: Collection[str] | None = None) -> Claim | None:
        """Claim the best claimable job (priority, then age), or return ``None`` if none.

        Never raises for contention: a job lost to another claimer is skipped. A job flow control holds
        back is skipped too (a paused name, a group at its limit): the best job of another group is taken,
        so one busy group never blocks the others; with the whole board paused it returns ``None``.

        :param names: only jobs with one of these names (a worker's handlers).
            Without it, every job except the library's internal ones
            (names starting with ``jobboard.``).
        """
        self._ensure_open()
        return await self.backend.claim_next(check_owner(owner), names)

    async def consume_and_claim_next(
        self, claim: Claim, result: Any = None, *, names: Collection[str] | None = None,
    ) -> Claim | None:
        """Consume ``claim`` (as :meth:`consume`), then claim the next job for the same owner
        (as :meth:`claim_next` with ``names``): a worker's free slot takes its next job.

        The consume is complete before the claim is tried. Backends may do both in
        one round trip. Raises what ``consume`` raises, and then claims nothing.
        """
        self._ensure_open()
        settle = Settle(SettleAction.CONSUME, result=result, encoded_result=self._encoded_result(claim, result))
        return await self.backend.consume_and_claim_next(claim, settle, names)

    @property
    def fuses_consume_and_claim(self) -> bool:
        """Whether :meth:`consume_and_claim_next` is one backend call (the backend implements it), not a
        consume and then a claim: a worker whose next job would take a round trip of its own uses it then."""
        return type(self.backend).consume_and_claim_next is not Backend.consume_and_claim_next

    async def claim_many(self, owner: str, count: int, *, names: Collection[str] | None = None) -> list[Claim]:
        """Claim up to ``count`` of the best claimable jobs for ``owner`` (claim-ahead): the claims ``count``
        calls of :meth:`claim_next` would make, in their order (priority, then age), each its own claim (its
        generation, fenced, renewed and released with the board's session like any other). Flow control is
        checked job by job, as each claim would be: a group with one permit gives one job. Fewer, or none,
        when fewer are claimable. Backends may make it one round trip (:attr:`claims_many_at_once`);
        cancelled after its request went out, the claims it made are released in the background.

        :raises InvalidJob: ``count`` is not a whole number >= 1.
        """
        self._ensure_open()
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidJob(f"count must be a whole number >= 1, not {count!r}")
        return await self.backend.claim_many(check_owner(owner), names, count)

    @property
    def claims_many_at_once(self) -> bool:
        """Whether :meth:`claim_many` is one backend call (the backend implements it), not a loop of claims."""
        return self.backend.claims_many_at_once

    async def watch_claim(self, claim: Claim) -> str:
        """Wait until ``claim`` stops being current and return why.

        Returns at once for a stale claim. A claim stops being current when it
        is settled (through any board), released (its board closed, its session
        expired) or the job is claimed again. A worker runs this beside the
        handler and cancels the handler when it returns.
        """
        self._ensure_open()
        return await self.backend.watch_claim(claim)

    async def consume(self, claim: Claim, result: Any = None, *, connection: Any = None) -> None:
        """Mark the job done and remove it, atomically with releasing its dependents.

        ``result`` goes to every dependent job (and to ``wait_for_completion``
        when the job was posted with ``keep_result``).

        :param connection: the application's own open database connection, to settle in its
            transaction (backends that cannot raise ``Unsupported``).
        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        :raises InvalidJob: msgpack cannot encode ``result``, or it is over :attr:`max_posting_bytes`.
        """
        self._ensure_open()
        encoded = self._encoded_result(claim, result)
        await self.backend.settle(claim, Settle(SettleAction.CONSUME, result=result, encoded_result=encoded,
                                                connection=connection))

    def _encoded_result(self, claim: Claim, result: Any) -> bytes:
        """``result`` encoded for ``claim``'s consume. :raises InvalidJob: not encodable, or over the size limit."""
        encoded = encode_value(result, what=f"result of job {claim.job.id}")
        check_result_size(claim.job.id, encoded, self.backend.max_posting_bytes)
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
        await self.backend.settle(claim, Settle(SettleAction.ABANDON,
                                                retry_after=check_retry_after(retry_after) or None, error=error))

    async def release(self, claim: Claim) -> None:
        """Give back a claim whose job was never started (a claim made ahead, at a worker's stop): the job is
        claimable again at once, and where the backend can (:attr:`releases_uncounted`) the attempt its claim
        counted is uncounted; elsewhere it is an :meth:`abandon`. Fenced like a settle. Nothing checks that
        the job did not start: a handler that releases its own claim after working gets attempts without end
        (past ``max_attempts``); a failed attempt is an :meth:`abandon`.

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        """
        self._ensure_open()
        await self.backend.release(claim)

    @property
    def releases_uncounted(self) -> bool:
        """Whether :meth:`release` uncounts the claim's attempt (the backend implements it)."""
        return self.backend.releases_uncounted

    async def trash(self, claim: Claim, reason: str, *, error: LastError | None = None) -> None:
        """Remove the job to the trash with ``reason``; its dependents follow it there.

        ``error`` is kept as the trashed job's ``last_error``.

        :raises ClaimLost: the claim is not current (nothing is changed).
        :raises NotOwner: the claim's owner does not hold the job.
        """
        self._ensure_open()
        await self.backend.settle(claim, Settle(SettleAction.TRASH, reason=str(reason), error=error))

    async def cancel(self, job: JobRef, reason: str) -> None:
        """Move a job to the trash with ``reason``, with its dependents, whoever holds it.

        Atomic, like ``trash``. A claimed job's claim is revoked in the same
        write: its owner's ``watch_claim`` returns (a worker cancels the
        handler) and settling that claim raises ``ClaimLost``.

        :raises JobNotFound: the job is not on the board.
        """
        self._ensure_open()
        await self.backend.cancel(job_id_of(job), str(reason))

    # -- reading -----------------------------------------------------------

    async def get(self, job: JobRef) -> Job:
        """A fresh snapshot of a job on the board (not in the trash).

        :raises JobNotFound: the job is not on the board.
        """
        self._ensure_open()
        return await self.backend.get(job_id_of(job))

    def iterjobs(self, *, only_unclaimed: bool = False) -> AsyncIterator[Job]:
        """Iterate the jobs on the board: higher priority first, then oldest first.

        ``only_unclaimed`` keeps jobs in state ``UNCLAIMED`` (delayed ones
        included). Entries that are not valid postings are skipped and reported
        as ``MALFORMED`` events; they never end the iteration.
        """
        self._ensure_open()
        return self.backend.iterjobs(only_unclaimed)

    def listing(self, *, only_unclaimed: bool = False) -> AsyncIterator[ListedJob]:
        """Iterate the jobs on the board like :meth:`iterjobs`, each with its state and owner.

        Each entry is a snapshot; entries are not one atomic picture of the board
        (a job may be settled between two of them).
        """
        self._ensure_open()
        return self.backend.listing(only_unclaimed)

    async def state(self, job: JobRef) -> JobState:
        """Where the job stands. A job neither on the board nor in the trash is ``COMPLETE``."""
        self._ensure_open()
        return await self.backend.state(job_id_of(job))

    async def owner(self, job: JobRef) -> str | None:
        """The current owner, or ``None`` when the job is not claimed (or not on the board)."""
        self._ensure_open()
        return await self.backend.owner(job_id_of(job))

    async def job_count(self) -> int:
        """How many jobs are on the board (unclaimed, claimed and waiting)."""
        self._ensure_open()
        return await self.backend.job_count()

    def trashed(self) -> AsyncIterator[TrashedJob]:
        """Iterate the trash, oldest first, with the reason of each."""
        self._ensure_open()
        return self.backend.trashed()

    def could_be_job_id(self, job_id: str) -> bool:
        """``False`` when ``job_id`` is not of the form this backend gives its ids: no job was ever
        posted under it here. No I/O, never raises.

        A board keeps nothing of a consumed job (but a kept result), so ``state()`` of an id that
        left the board says ``COMPLETE`` whether it was consumed or never posted; this tells a
        mistyped id from a finished job. A backend that does not tell says ``True`` of every id
        but the empty one.
        """
        return self.backend.could_be_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        """``True`` when no job was ever posted on this board under ``job_id``: it is not of the
        form of the board's ids (:meth:`could_be_job_id`), or past the last id the board has
        given. ``False`` when one may have been (the backend cannot tell a consumed job from
        nothing). One read at most; the answer holds when it was read (a post may give the id
        a moment later).
        """
        self._ensure_open()
        return await self.backend.never_posted(job_id)

    # -- progress and the trash --------------------------------------------

    async def report_progress(self, claim: Claim, fraction: float, note: str = "") -> None:
        """Store how far the claimed job is, with its claim: ``Job.progress`` shows it to every reader.

        Fenced like a settle. One backend write per call: callers that report
        often coalesce (a worker's ``JobContext.progress`` writes at most once
        a second). The progress goes when the claim does (settled or released).

        :raises ClaimLost: the claim is not current (nothing is written).
        :raises NotOwner: the claim's owner does not hold the job.
        :raises InvalidJob: ``fraction`` not in 0..1, or ``note`` not a string.
        :raises Unsupported: the backend does not store progress.
        """
        self._ensure_open()
        await self.backend.report_progress(claim, check_progress(fraction, note, time.time()))

    async def purge(self, *, older_than: float = 0.0) -> int:
        """Remove from the trash every job trashed at least ``older_than`` seconds ago; return how many.

        Each removal is atomic; a purge running beside a requeue removes or
        requeues a job, never both.

        :raises InvalidJob: ``older_than`` is negative or not a number.
        :raises Unsupported: the backend cannot purge its trash.
        """
        self._ensure_open()
        return await self.backend.purge(check_age(older_than))

    async def requeue(self, job: JobRef, *, reset_attempts: bool = False) -> Job:
        """Move a trashed job back on the board as ``UNCLAIMED``, keeping its id; return it.

        Atomic: the job leaves the trash in the same write that puts it back.
        It keeps its posting order (an old job goes before newer ones of its
        priority), details, key and ``last_error``; it is claimable at once.
        ``reset_attempts`` counts its attempts from 0 again (otherwise a job
        trashed for "max attempts exceeded" is trashed again at its next claim).
        Dependents that were trashed with it stay in the trash.

        :raises JobNotFound: the job is not in the trash.
        :raises InvalidJob: the job waits for a dependency whose result never came
            (a dependent trashed with its dependency): post it again instead.
        :raises Unsupported: the backend cannot requeue from its trash.
        """
        self._ensure_open()
        return await self.backend.requeue(job_id_of(job), bool(reset_attempts))

    # -- waiting and watching ----------------------------------------------

    async def wait(self, *, names: Collection[str] | None = None) -> list[Job]:
        """Return the claimable jobs once at least one exists (board order).

        Event-driven, no timeout: bound it with ``anyio.fail_after``. Backends
        may return only the first jobs of a long board. Jobs flow control holds back are not claimable:
        when only a rate holds them, ``wait`` returns when its next permit is due (no polling needed).

        :param names: only jobs with one of these names.
        """
        self._ensure_open()
        return await self.backend.wait(names)

    async def wait_for_completion(self, job: JobRef) -> Outcome:
        """Wait until the job is consumed or trashed and return how it ended."""
        self._ensure_open()
        return await self.backend.wait_for_completion(job_id_of(job))

    def events(self, maxlen: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """Subscribe now to the board's events (see :class:`~jobboard.board.events.EventStream`).

        :raises BoardClosed: the board is not open.
        """
        self._ensure_open()
        self.backend.observed()
        return self.services.hub.subscribe(maxlen)

    # -- entities ----------------------------------------------------------

    async def register_entity(self, name: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Announce a live participant; it disappears when this board closes or its session ends.

        :raises InvalidJob: empty name or metadata msgpack cannot encode.
        """
        self._ensure_open()
        check_owner(name)
        given = dict(metadata or {})
        await self.backend.register_entity(name, given, encode_value(given, what=f"metadata of entity {name!r}"))

    async def unregister_entity(self, name: str) -> None:
        """Remove an entity this board registered (nothing happens if it did not)."""
        self._ensure_open()
        await self.backend.unregister_entity(name)

    async def entities(self) -> list[Entity]:
        """The live participants registered on this board's storage, by name."""
        self._ensure_open()
        return await self.backend.entities()

    # -- flow control (see jobboard.board.limits for what each backend guarantees) ----------------

    async def set_limit(self, group: str, *, concurrency: int | None = None, sequence: bool = False,
                        rate: Rate | tuple[int, float] | str | None = None) -> None:
        """Store ``group``'s limit on the board, replacing any it had: every board on this storage honours
        it from its next claim. Atomic; changeable at any time (a lower concurrency ends no running job:
        new claims wait until the group is under it).

        :param concurrency: at most this many jobs of the group claimed at once (0 holds the group).
        :param sequence: one job of the group at a time, in posting order; a trashed job does not stop
            the sequence (see :mod:`jobboard.board.limits`).
        :param rate: at most ``count`` claims in any ``period`` seconds: ``(20, 1.0)``, ``Rate`` or ``"20/s"``.
        :raises InvalidJob: a bad group or limit, or none given (one line naming it).
        :raises Unsupported: the backend does not implement flow control.
        """
        self._ensure_open()
        await self.backend.set_limit(limit_spec(group, concurrency, sequence, rate))

    async def clear_limit(self, group: str) -> bool:
        """Remove ``group``'s limit; return whether it had one. Its held-back jobs become claimable.

        :raises Unsupported: the backend does not implement flow control.
        """
        self._ensure_open()
        return await self.backend.clear_limit(check_group(group))

    async def limits(self) -> list[GroupLimit]:
        """Every group's limit, by group, with its live figures (jobs running, jobs waiting), each group's
        read together. :raises Unsupported: the backend does not implement flow control."""
        self._ensure_open()
        return await self.backend.limits()

    async def pause(self, name: str | None = None) -> None:
        """Stop new claims of jobs called ``name`` (``None``: of every job) on every board of this storage,
        within a second; running jobs finish and settle as usual. Idempotent.

        :raises Unsupported: the backend does not implement flow control.
        """
        self._ensure_open()
        await self.backend.pause(self._pausable(name))

    async def resume(self, name: str | None = None) -> None:
        """Lift :meth:`pause` of ``name`` (``None``: the whole board's pause; names paused one by one stay
        paused). Idempotent. :raises Unsupported: the backend does not implement flow control."""
        self._ensure_open()
        await self.backend.resume(self._pausable(name))

    async def paused(self) -> Paused:
        """What is paused now. :raises Unsupported: the backend does not implement flow control."""
        self._ensure_open()
        return await self.backend.paused()

    @staticmethod
    def _pausable(name: str | None) -> str | None:
        if name is not None:
            check_name(name)
        return name
