"""The worker (conductor): claim, run a handler, settle; repeat.

One anyio task group holds the claim loop and one task per running job (at most
``concurrency``). Each job task runs the handler beside a watcher of its claim
(``board.watch_claim``) and, with a lease, a lease keeper: if the claim is lost
or the lease runs out, the handler is cancelled at once and the job is not
settled by this worker. Settling is shielded from cancellation, and transient
backend errors are retried with back-off; they never stop the worker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup

from jobboard.board import JobBoard
from jobboard.errors import BackendUnavailable, BoardClosed, ClaimLost, InvalidJob, JobBoardError, NotOwner
from jobboard.handlers import Handler, Handlers, JobContext
from jobboard.job import Claim
from jobboard.outcome import Action, Settlement, decide
from jobboard.worker_support import Backoff, RunningJob, WorkerStats

logger = logging.getLogger(__name__)

SPIN_MISSES = 3
"""Immediate wake-ups with nothing claimable before the worker starts backing off."""
BLOCKED = 0.005
"""A wait() that took longer than this (seconds) really slept."""


def default_owner() -> str:
    """``host-pid-random``: unique per worker process and instance."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker behaves. Every duration is in seconds."""

    owner: str = field(default_factory=default_owner)
    concurrency: int = 1
    """Jobs in flight at once."""
    idle_backoff: float = 0.1
    idle_backoff_factor: float = 1.5
    idle_backoff_max: float = 10.0
    """An idle worker sleeps in ``board.wait()``; it backs off (zk-plan's defaults)
    only when the board says there is work that it then fails to claim."""
    grace_period: float = 30.0
    """On shutdown, how long running jobs may take before they are cancelled and abandoned."""
    max_attempts: int | None = None
    """For jobs posted without ``max_attempts``: after this many failures, trash."""
    failure_delay: float = 0.0
    """``retry_after`` used when a handler fails (not for :class:`Retry`)."""
    lease: float | None = None
    """Seconds a claim may go unrenewed before this worker gives it up as lost."""
    lease_renewal: Literal["auto", "heartbeat"] = "auto"
    """``auto``: the worker renews while the handler runs (catches a blocked event
    loop); ``heartbeat``: only ``ctx.heartbeat()`` renews (catches a hung handler)."""
    settle_timeout: float = 30.0
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Published with the worker's entity registration."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.lease is not None and self.lease <= 0:
            raise ValueError("lease must be a positive number of seconds")


class Worker:
    """Runs ``handler`` on jobs from ``board``; see the module docstring.

    With a :class:`~jobboard.handlers.Handlers` registry, only jobs whose names
    it handles are claimed (unless ``names`` says otherwise).
    """

    def __init__(
        self, board: JobBoard, handler: Handler, config: WorkerConfig | None = None, *,
        names: Collection[str] | None = None,
    ) -> None:
        self.board, self.handler = board, handler
        self.config = config or WorkerConfig()
        self.names = names if names is not None else (handler.names if isinstance(handler, Handlers) else None)
        self.stats = WorkerStats()
        self.running: dict[str, RunningJob] = {}
        self._slots = anyio.Semaphore(self.config.concurrency)
        self._stopping = False
        self._claiming = anyio.CancelScope()
        self._all_done = anyio.Event()
        self._waiting_on_board = False
        self._work_maybe = anyio.Event()
        """Set when the claimer waiting on the board wakes up: the others try to claim too."""
        self.started = anyio.Event()
        """Set once the worker is registered and about to claim."""

    @property
    def owner(self) -> str:
        return self.config.owner

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; running jobs get the grace period (``now``: none)."""
        self._stopping = True
        self._claiming.cancel()
        if now:
            for job in list(self.running.values()):
                job.cancel("worker stopping now")

    async def run(self, *, handle_signals: bool = False) -> WorkerStats:
        """Work until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``; a second one stops at once).

        :raises BoardClosed: the board was closed under the worker.
        """
        await self._register()
        self.started.set()
        try:
            async with anyio.create_task_group() as side:
                if handle_signals:
                    side.start_soon(self._stop_on_signals)
                async with anyio.create_task_group() as jobs:
                    await self._claim_loop(jobs)
                    await self._drain()
                side.cancel_scope.cancel()
        finally:
            await self._unregister()
        return self.stats

    # -- claiming ----------------------------------------------------------------

    async def _claim_loop(self, jobs: TaskGroup) -> None:
        """``concurrency`` claimers: claiming takes round trips, so free slots fill in parallel."""
        with self._claiming:
            async with anyio.create_task_group() as claimers:
                for _ in range(self.config.concurrency):
                    claimers.start_soon(self._claimer, jobs)

    async def _claimer(self, jobs: TaskGroup) -> None:
        backoff = Backoff(self.config.idle_backoff, self.config.idle_backoff_factor, self.config.idle_backoff_max)
        while not self._stopping:
            await self._slots.acquire()
            claim = await self._claim(backoff)
            if claim is None:
                self._slots.release()
                continue
            backoff.reset()
            self.stats.claimed += 1
            jobs.start_soon(self._run_job, claim)

    async def _claim(self, backoff: Backoff) -> Claim | None:
        try:
            with anyio.CancelScope(shield=True):  # a claim made must not be lost to stop()
                claim = await self.board.claim_next(self.owner, names=self.names)
        except BoardClosed:
            raise
        except BackendUnavailable as error:
            self.stats.backend_errors += 1
            logger.warning("%s: board unavailable (%s); retrying", self.owner, error)
            await anyio.sleep(backoff.next())
            return None
        if claim is None:
            await self._idle(backoff)
        return claim

    async def _idle(self, backoff: Backoff) -> None:
        """Sleep in ``board.wait()`` until there is work.

        Losing a race for a job is normal (another worker was faster) and costs
        no sleep. Only a spin backs off: ``wait()`` saying at once, several times
        in a row, that there is work which claiming then does not find.
        """
        if backoff.misses >= SPIN_MISSES:
            await anyio.sleep(backoff.next())
        started = anyio.current_time()
        if self._waiting_on_board:  # one claimer waits on the board; the others wait for it
            with anyio.move_on_after(self.config.idle_backoff_max):
                await self._work_maybe.wait()
            return
        self._waiting_on_board = True
        try:
            with anyio.move_on_after(self.config.idle_backoff_max):
                found = bool(await self.board.wait(names=self.names))
        except BackendUnavailable as error:
            logger.warning("%s: board unavailable while idle (%s)", self.owner, error)
            await anyio.sleep(backoff.next())
            return
        finally:
            self._waiting_on_board = False
            woken, self._work_maybe = self._work_maybe, anyio.Event()
            woken.set()
        if found and anyio.current_time() - started < BLOCKED:
            backoff.misses += 1
        else:  # it really waited: new work came, this is no spin
            backoff.reset()

    # -- running a job -------------------------------------------------------------

    async def _run_job(self, claim: Claim) -> None:
        job = RunningJob(claim, self.config.lease)
        self.running[claim.job.id] = job
        try:
            try:
                settlement = await self._execute(job)
            except anyio.get_cancelled_exc_class():  # the worker itself was cancelled from outside
                await self._settle(claim, Settlement(Action.ABANDON, reason="worker cancelled"))
                raise
            if settlement is not None:
                await self._settle(claim, settlement)
        finally:
            del self.running[claim.job.id]
            self._slots.release()
            if not self.running:
                self._all_done.set()

    async def _execute(self, job: RunningJob) -> Settlement | None:
        """Run the handler; the settlement, or ``None`` when the claim was lost."""
        context = JobContext(job.claim, self.board, job.heartbeat)
        settlement: Settlement | None = None
        with job.scope:
            async with anyio.create_task_group() as guards:
                guards.start_soon(self._watch_claim, job)
                if job.lease is not None:
                    guards.start_soon(self._keep_lease, job)
                settlement = await self._invoke(context)
                guards.cancel_scope.cancel()
        if job.lost is not None:
            self.stats.lost += 1
            logger.warning("%s: lost job %s (%s); its handler was cancelled", self.owner, job.claim.job.id, job.lost)
            return None
        if settlement is None:  # cancelled: the worker is stopping
            self.stats.abandoned_on_shutdown += 1
            return Settlement(Action.ABANDON, reason=job.cancelled_because)
        return settlement

    async def _invoke(self, context: JobContext) -> Settlement:
        try:
            result = await self.handler(context)
        except Exception as error:  # noqa: BLE001 - whatever a handler raises settles its job
            return decide(context.claim, error=error, max_attempts=self.config.max_attempts,
                          failure_delay=self.config.failure_delay)
        return decide(context.claim, result=result)

    async def _watch_claim(self, job: RunningJob) -> None:
        """Cancel the handler once the claim is lost; a transient outage is not a loss."""
        while True:
            try:
                reason = await self.board.watch_claim(job.claim)
                break
            except BackendUnavailable:
                await anyio.sleep(0.2)  # the session (and the claim) may well survive this
            except JobBoardError as error:
                reason = f"could not watch the claim: {error}"
                break
        job.lose(reason)

    async def _keep_lease(self, job: RunningJob) -> None:
        assert job.lease is not None
        while (left := job.lease_left()) > 0:
            await anyio.sleep(min(left, job.lease / 3))
            if self.config.lease_renewal == "auto" and job.lease_left() > 0:
                job.heartbeat()  # on time: the event loop is alive
        job.lose(f"lease of {job.lease}s ran out")
        await self._settle(job.claim, Settlement(Action.ABANDON, reason="lease ran out"))  # retried, shielded

    # -- settling ----------------------------------------------------------------

    async def _settle(self, claim: Claim, settlement: Settlement) -> None:
        """Apply a settlement, shielded from cancellation, retrying transient failures."""
        backoff = Backoff(0.1, 2.0, 5.0)
        with anyio.CancelScope(shield=True):
            while True:
                try:
                    with anyio.fail_after(self.config.settle_timeout):
                        await self._apply(claim, settlement)
                    self.stats.count(settlement.action)
                    return
                except (ClaimLost, NotOwner) as error:
                    self.stats.lost += 1
                    logger.warning("%s: could not settle job %s: %s", self.owner, claim.job.id, error)
                    return
                except InvalidJob as error:  # a result msgpack cannot encode, a reason too large...
                    if settlement.action is Action.ABANDON:
                        logger.error("%s: could not abandon job %s: %s", self.owner, claim.job.id, error)
                        return
                    settlement = (decide(claim, error=error, max_attempts=self.config.max_attempts)
                                  if settlement.action is Action.CONSUME
                                  else Settlement(Action.ABANDON, reason=str(error)))  # at most one re-decision
                except JobBoardError as error:
                    logger.error("%s: could not settle job %s: %s", self.owner, claim.job.id, error)
                    return
                except (BackendUnavailable, TimeoutError) as error:
                    self.stats.backend_errors += 1
                    if backoff.attempts >= 8:
                        logger.error("%s: gave up settling job %s: %s", self.owner, claim.job.id, error)
                        return
                    await anyio.sleep(backoff.next())

    async def _apply(self, claim: Claim, settlement: Settlement) -> None:
        if settlement.action is Action.CONSUME:
            await self.board.consume(claim, settlement.result)
        elif settlement.action is Action.ABANDON:
            await self.board.abandon(claim, retry_after=settlement.retry_after)
        else:
            await self.board.trash(claim, settlement.reason)

    # -- shutdown and health --------------------------------------------------------

    async def _drain(self) -> None:
        """Give running jobs the grace period, then cancel (and abandon) the rest."""
        if self.running:
            self._all_done = anyio.Event()
            with anyio.move_on_after(self.config.grace_period):
                await self._all_done.wait()
        for job in list(self.running.values()):
            job.cancel(f"worker stopped; grace period of {self.config.grace_period}s over")

    async def _stop_on_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for number in signals:
                logger.info("%s: %s received", self.owner, signal.Signals(number).name)
                self.stop(now=self._stopping)

    async def _register(self) -> None:
        metadata = {"host": socket.gethostname(), "pid": os.getpid(), "concurrency": self.config.concurrency,
                    "names": sorted(self.names) if self.names is not None else None,
                    "started_at": time.time(), **self.config.metadata}
        await self.board.register_entity(self.owner, metadata)

    async def _unregister(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                if self.board.is_open:
                    await self.board.unregister_entity(self.owner)
            except JobBoardError as error:
                logger.warning("%s: could not unregister: %s", self.owner, error)
