"""Running one claimed job: middleware, timeout, claim watch, lease, settle, the line in the log and the
count of its outcome.

Used by :class:`~jobboard.worker.conductor.Worker`; one :class:`JobRunner` serves all of
a worker's jobs, each held as a :class:`RunningJob`, and counts their outcomes in the worker's
:class:`~jobboard.worker.stats.WorkerStats`. Settling is shielded from cancellation; transient backend
errors (``BackendUnavailable``, a timeout) are retried with capped back-off
until the settle applies, the claim is found lost, or the worker stops and its
grace period is over (then the board's close releases the claim).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from jobboard.backend import SettleAction
from jobboard.board.checks import TIMEOUT_KEY
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost, InvalidJob, JobBoardError, NotOwner
from jobboard.job import Claim
from jobboard.worker.config import WorkerConfig
from jobboard.worker.guards import Guards
from jobboard.worker.handlers import THREADS_RUNNING, Handler, Handlers, JobContext, Middleware
from jobboard.worker.progress import ProgressReporter
from jobboard.worker.retry import Backoff, RetryPolicy, Settlement, decide

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.worker.stats import WorkerStats

logger = logging.getLogger("jobboard.worker")

SettleApart = Callable[[Settlement, str], Awaitable[None]]
"""Takes a finished job's settle to run it apart from the job's slot."""

SETTLE_BACKOFF = (0.1, 2.0, 5.0)
"""Initial delay, factor and cap (seconds) between retries of a settle that met a transient error."""


class RunningJob:
    """One claimed job while its handler runs: its cancel scope, lease and fate."""

    def __init__(self, claim: Claim, lease: float | None, guards: Guards) -> None:
        self.claim = claim
        self.lease = lease
        self.guards = guards
        """The tasks beside its handler: the claim's watch, the lease's keeper, the progress writer."""
        self.scope = anyio.CancelScope()
        self.lost: str | None = None
        self.cancelled_because = ""
        self.limit: int | None = None
        """The attempts this job gets (the job's ``max_attempts``, else its retry policy's)."""
        self.started = time.monotonic()
        self._renewed_at = anyio.current_time()
        self.next_claim: Claim | None = None
        """The job its consume claimed for the same slot (``board.consume_and_claim_next``), to run next."""
        self.not_run = False
        """Its attempts were spent before this claim (requeued without a reset): trashed without running."""

    def heartbeat(self) -> None:
        self._renewed_at = anyio.current_time()

    def lease_left(self) -> float:
        assert self.lease is not None
        return self._renewed_at + self.lease - anyio.current_time()

    def lose(self, reason: str) -> None:
        """The claim is gone: cancel the handler and its other guards; the job is not settled here."""
        if self.lost is None:
            self.lost = reason
        self.scope.cancel()
        self.guards.cancel()

    def cancel(self, reason: str) -> None:
        """Cancel the handler (shutdown); the job is abandoned."""
        self.cancelled_because = reason
        self.scope.cancel()
        self.guards.cancel()

    def duration(self) -> float:
        return time.monotonic() - self.started


class JobRunner:
    """Runs jobs for one worker and settles them; see the module docstring."""

    def __init__(
        self, board: JobBoard, handler: Handler, config: WorkerConfig, stats: WorkerStats,
        middleware: Sequence[Middleware], shared: dict[str, Any], stopping: Callable[[], float | None], *,
        names: Collection[str] | None = None, take_next: Callable[[], bool] = lambda: False,
    ) -> None:
        self.board, self.handler, self.config, self.stats = board, handler, config, stats
        self.middleware, self.shared, self.names = list(middleware), shared, names
        self._stopping_since = stopping
        """When the worker began stopping (``anyio.current_time()``), or ``None`` while it runs."""
        self._take_next = take_next
        """Whether a job consumed now should claim the next one for its slot (in the same backend call)."""
        self._retries_due: dict[str, float] = {}
        """When jobs this worker put back for a retry become claimable (``anyio.current_time()``)."""

    def claimed(self, job_id: str) -> None:
        """The worker claimed ``job_id``: a retry of it this runner put back is due no more."""
        self._retries_due.pop(job_id, None)

    def retries_due_after(self, moment: float) -> list[float]:
        """When the retries this runner put back become claimable, those after ``moment``."""
        return [at for at in self._retries_due.values() if at > moment]

    async def run(self, job: RunningJob, settle_apart: SettleApart | None = None) -> None:
        """Run the job's handler and settle it (or not, when its claim was lost); ``settle_apart``: hand the
        settle to it (it settles in a task of its own: :mod:`jobboard.worker.settling`)."""
        try:
            decided = await self._execute(job)
        except anyio.get_cancelled_exc_class():  # the worker itself was cancelled from outside
            await self.settle(job, self._given_back(job, "worker cancelled"), "abandoned_on_shutdown")
            raise
        if decided is not None:
            await (settle_apart or partial(self.settle, job))(*decided)

    # -- the handler -----------------------------------------------------------

    async def _execute(self, job: RunningJob) -> tuple[Settlement, str] | None:
        """Run the handler; the settlement and its outcome, or ``None`` when the claim was lost (or revoked)."""
        policy, timeout = self._options(job.claim)
        job.limit = policy.limit(job.claim.job.max_attempts)
        if job.limit is not None and job.claim.attempt > job.limit:  # e.g. requeued without a reset
            job.not_run = True
            return self._spent(job.claim, job.limit), "failed"
        settlement: Settlement | None = None
        with job.scope:
            try:
                context = JobContext(job.claim, self.board, job.heartbeat, self.shared, progress_of(self.board, job))
                job.guards.start_soon(partial(self._watch_claim, job))
                if job.lease is not None:
                    job.guards.start_soon(partial(self._keep_lease, job))
                settlement = await self._invoke(context, policy, timeout)
            finally:
                await job.guards.close()
        if job.lost is not None:
            cancelled = job.lost == "trashed"  # only the owner trashes a claimed job, or a cancel
            self.stats.count("cancelled" if cancelled else "lost")
            log_outcome(job, "cancelled" if cancelled else "lost", level=logging.INFO if cancelled else logging.WARNING,
                        reason=job.lost if not cancelled else "cancelled from outside (board.cancel)")
            return None
        if settlement is None:  # cancelled: the worker is stopping
            return self._given_back(job, job.cancelled_because), "abandoned_on_shutdown"
        return settlement, settlement.outcome

    def _given_back(self, job: RunningJob, why: str) -> Settlement:
        """A job a stop interrupted, given back by ``board.release``: a stop is no failure, so its attempt is
        uncounted where the board can (``releases_uncounted``; elsewhere the release is an abandon, counted). A
        plain ``def`` handler whose thread still runs is abandoned, counted: it may never end, and must not come
        back uncounted at every stop."""
        if (job.claim.job.id, job.claim.generation) in THREADS_RUNNING:
            return Settlement(SettleAction.ABANDON, reason=f"{why}; its handler's thread still runs: given back with "
                              "its attempt counted (the job may run again beside that thread)")
        counted = "uncounted" if self.board.releases_uncounted else "its attempt counted (this board cannot uncount)"
        return Settlement(SettleAction.ABANDON, reason=f"{why}; given back {counted}", release=True)

    @staticmethod
    def _spent(claim: Claim, limit: int) -> Settlement:
        """A claim past the attempts its policy allows: trashed unrun, keeping its last error."""
        return Settlement(SettleAction.TRASH, error=claim.job.last_error,
                          reason=f"attempt {claim.attempt} of {limit} not run: its attempts were spent "
                                 "(requeue it with reset_attempts to run it again)")

    def _options(self, claim: Claim) -> tuple[RetryPolicy, float | None]:
        """The retry policy and timeout for this job: the job's, the handler's, the worker's."""
        policy, timeout = self.config.retry, self.config.timeout
        if isinstance(self.handler, Handlers):
            options = self.handler.options(claim.job.name)
            policy = options.retry or policy
            timeout = options.timeout or timeout
        job_timeout = claim.job.details.get(TIMEOUT_KEY)
        if isinstance(job_timeout, (int, float)) and not isinstance(job_timeout, bool) and job_timeout > 0:
            timeout = float(job_timeout)
        return policy, timeout

    async def _invoke(self, context: JobContext, policy: RetryPolicy, limit_s: float | None) -> Settlement | None:
        """The settlement of the handler's result or error; ``None`` if it was cancelled."""
        completed = False
        try:
            with anyio.move_on_after(math.inf if limit_s is None else limit_s) as limit:
                result = await self._call(context, 0)
                completed = True
            if not completed and limit.cancelled_caught:
                raise TimeoutError(f"job {context.job.name} timed out after {limit_s}s")
        except Exception as error:  # noqa: BLE001 - whatever a handler raises settles its job
            return decide(context.claim, error=error, policy=policy)
        return decide(context.claim, result=result) if completed else None

    async def _call(self, context: JobContext, index: int) -> Any:
        """The handler, wrapped in the middleware from ``index`` on (outermost first)."""
        if index == len(self.middleware):
            return await self.handler(context)
        return await self.middleware[index](context, lambda: self._call(context, index + 1))

    async def _watch_claim(self, job: RunningJob) -> None:
        """Cancel the handler once the claim is lost; a transient outage is not a loss.

        A watch that fails for good is no loss either: the handler goes on and its
        settle finds out (giving the job up here would leave it claimed). A handler done before this task's
        first turn (a short one that never waited) is not watched at all: no read for it (:mod:`.guards`).
        """
        while True:
            try:
                reason = await self.board.watch_claim(job.claim)
                break
            except (BackendUnavailable, TimeoutError):
                await anyio.sleep(0.2)  # the session (and the claim) may well survive this
            except JobBoardError as error:
                logger.warning("%s: cannot watch the claim of job %s (%s); its settle will tell",
                               self.config.owner, job.claim.job.id, error)
                return
        if not job.guards.closed:  # a wake-up already due when the handler ended
            job.lose(reason)

    async def _keep_lease(self, job: RunningJob) -> None:
        assert job.lease is not None
        while (left := job.lease_left()) > 0:
            await anyio.sleep(min(left, job.lease / 3))
            if job.guards.closed:  # a wake-up already due when the handler ended
                return
            if self.config.lease_renewal == "auto" and job.lease_left() > 0:
                job.heartbeat()  # on time: the event loop is alive
        with job.guards.holding():  # the job's end waits for the abandon
            job.lose(f"lease of {job.lease}s ran out")
            await self._apply_with_retries(job.claim, Settlement(SettleAction.ABANDON, reason="lease ran out"))

    # -- settling ----------------------------------------------------------------

    async def settle(self, job: RunningJob, settlement: Settlement, outcome: str) -> None:
        """Apply a settlement (shielded, transient errors retried), count it and log its line."""
        applied, settlement = await self._apply_with_retries(job.claim, settlement, job)
        if applied is None:
            self.stats.count("unsettled")
            log_outcome(job, "unsettled", level=logging.ERROR, reason=settlement.reason)
        elif not applied:
            self.stats.count("lost")
            log_outcome(job, "lost", level=logging.WARNING, reason="the claim was no longer current at settle")
        else:
            if outcome != "abandoned_on_shutdown":
                outcome = settlement.outcome  # a settle refused as InvalidJob may be re-decided
            self.stats.count(outcome)
            log_outcome(job, outcome, settlement=settlement)
            if outcome == "retried":
                self._retries_due[job.claim.job.id] = anyio.current_time() + (settlement.retry_after or 0.0)

    async def _apply_with_retries(
        self, claim: Claim, settlement: Settlement, job: RunningJob | None = None,
    ) -> tuple[bool | None, Settlement]:
        """``True`` once applied, ``False`` if the claim was lost, ``None`` if given up; shielded.

        A consume of ``job`` when the worker takes a next job (``take_next``) claims it in the same
        call (``board.consume_and_claim_next``, into ``job.next_claim``); a retry consumes alone.
        """
        with anyio.CancelScope(shield=True):
            applied = await self._apply_until_done(claim, settlement, job)
        return applied

    async def _apply_until_done(
        self, claim: Claim, settlement: Settlement, job: RunningJob | None,
    ) -> tuple[bool | None, Settlement]:
        backoff: Backoff | None = None  # built at the first transient error
        fuse = job is not None and settlement.action is SettleAction.CONSUME and self._take_next()
        while True:
            try:
                with anyio.fail_after(self.config.settle_timeout):
                    if fuse and job is not None:
                        fuse = False
                        job.next_claim = await self.board.consume_and_claim_next(claim, settlement.result,
                                                                                 names=self.names)
                    else:
                        await self._apply(claim, settlement)
                return True, settlement
            except (ClaimLost, NotOwner):
                return False, settlement
            except (BackendUnavailable, TimeoutError) as error:  # before JobBoardError: it is one
                self.stats.backend_errors += 1
                if self._grace_over():
                    logger.error("%s: gave up settling job %s: %s", self.config.owner, claim.job.id, error)
                    return None, settlement
                backoff = backoff or Backoff(*SETTLE_BACKOFF, jitter=0.2)
                delay = backoff.next()
                logger.warning("%s: settling job %s met %s; retrying in %.1fs", self.config.owner,
                               claim.job.id, str(error) or type(error).__name__, delay)
                await anyio.sleep(delay)
            except InvalidJob as error:  # a result msgpack cannot encode, a reason too large...
                redecided = self._redecide(claim, settlement, error)
                if redecided is None:
                    return None, settlement
                settlement = redecided
            except JobBoardError as error:  # BoardClosed, or worse
                logger.error("%s: could not settle job %s: %s", self.config.owner, claim.job.id, error)
                return None, settlement

    def _redecide(self, claim: Claim, settlement: Settlement, error: InvalidJob) -> Settlement | None:
        """What to try after a settle the board refused as invalid; ``None``: give up.

        Each step makes the settle smaller, and the last one is an abandon, so it ends:
        without the error record, then a consume re-decided once, or a trash turned
        into an abandon that waits the longest back-off (an untrashable job is not spun).
        """
        owner, job_id = self.config.owner, claim.job.id
        if settlement.error is not None and settlement.action is not SettleAction.CONSUME:
            logger.warning("%s: settling job %s with its error record failed (%s); settling without it",
                           owner, job_id, error)
            return replace(settlement, error=None)
        if settlement.action is SettleAction.ABANDON:
            logger.error("%s: could not abandon job %s: %s", owner, job_id, error)
            return None
        if settlement.action is SettleAction.CONSUME:  # at most one re-decision
            return decide(claim, error=error, policy=self.config.retry)
        return Settlement(SettleAction.ABANDON, reason=str(error), retry_after=self.config.retry.max_delay)

    def _grace_over(self) -> bool:
        since = self._stopping_since()
        return since is not None and anyio.current_time() - since > self.config.grace_period

    async def _apply(self, claim: Claim, settlement: Settlement) -> None:
        if settlement.action is SettleAction.CONSUME:
            await self.board.consume(claim, settlement.result)
        elif settlement.release:
            await self.board.release(claim)
        elif settlement.action is SettleAction.ABANDON:
            await self.board.abandon(claim, retry_after=settlement.retry_after, error=settlement.error)
        else:
            await self.board.trash(claim, settlement.reason, error=settlement.error)


def progress_of(board: JobBoard, job: RunningJob) -> Callable[[float, str], None]:
    """``JobContext.progress`` of ``job``: no report, no reporter. The first report makes the job's
    :class:`ProgressReporter` and starts its writer among the job's guards, on the event loop (a handler's
    thread waits for that once); the writer is cancelled with the guards, a pending value goes with the settle."""
    token, loop_thread = anyio.lowlevel.current_token(), threading.get_ident()
    lock = threading.Lock()
    made: list[ProgressReporter] = []

    def start(reporter: ProgressReporter) -> None:  # on the event loop; none once the handler returned
        job.guards.start_soon(reporter.run)

    def report(fraction: float, note: str = "") -> None:
        if not made:
            with lock:  # not held while waiting for the loop (which may report too)
                first = not made
                if first:
                    made.append(ProgressReporter(board, job.claim))
            if first and threading.get_ident() == loop_thread:
                start(made[0])
            elif first:
                anyio.from_thread.run_sync(start, made[0], token=token)
        made[0].report(fraction, note)

    return report


def log_outcome(job: RunningJob, outcome: str, *, level: int = logging.INFO,
                settlement: Settlement | None = None, reason: str | None = None) -> None:
    """One line: ``<outcome> <name> <id> attempt a/m by <owner> in 0.012s[: detail]``."""
    claim = job.claim
    limit = job.limit
    attempt = f"{claim.attempt}/{limit}" if limit is not None else str(claim.attempt)
    extra: dict[str, Any] = {"outcome": outcome, "job_id": claim.job.id, "job_name": claim.job.name,
                             "attempt": claim.attempt, "max_attempts": limit, "owner": claim.owner,
                             "duration": round(job.duration(), 6)}
    detail = reason or (settlement.reason if settlement is not None and settlement.release else "")
    if settlement is not None and settlement.error is not None:
        extra["error"] = settlement.error.summary_line()
        detail = f"{settlement.error.type}: {' '.join(settlement.error.message.split())[:200]}"
    if job.not_run:
        last = f"; last error {detail}" if detail else ""
        detail = f"not run, over its attempts (requeue with reset_attempts to run it){last}"
    if settlement is not None and settlement.action is SettleAction.ABANDON and settlement.retry_after:
        extra["retry_in"] = round(settlement.retry_after, 3)
        detail += f"; next attempt in {settlement.retry_after:.1f}s"
    if reason:
        extra["reason"] = reason
    logger.log(level, "%s %s %s attempt %s by %s in %.3fs%s", outcome, claim.job.name, claim.job.id, attempt,
               claim.owner, job.duration(), f": {detail.lstrip('; ')}" if detail else "", extra=extra)
