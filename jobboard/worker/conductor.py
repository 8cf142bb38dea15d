"""The worker (conductor): claim, run a handler, settle; repeat.

One anyio task group holds the claim loop and one task per running job (at most
``concurrency``). Each job task runs the handler beside a watcher of its claim
(``board.watch_claim``) and, with a lease, a lease keeper: if the claim is lost
(or revoked by ``board.cancel``) or the lease runs out, the handler is
cancelled at once and the job is not settled by this worker (see
:mod:`jobboard.worker.running`). Transient backend errors never stop the worker:
claiming and idling back off, settling retries until it applies.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup

from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, BoardClosed, JobBoardError, found_in
from jobboard.job import Claim
from jobboard.schedules.scheduler import run_scheduler
from jobboard.worker.ahead import ClaimAhead, check_prefetch
from jobboard.worker.burst import Burst, Sent
from jobboard.worker.config import WorkerConfig, default_owner
from jobboard.worker.entity import WorkerEntity
from jobboard.worker.guards import Guards
from jobboard.worker.handlers import Handler, Handlers, Hook, Middleware, as_async
from jobboard.worker.idle import ClaimerPace, Idler
from jobboard.worker.retry import Backoff, Settlement
from jobboard.worker.running import JobRunner, RunningJob
from jobboard.worker.settling import SettlesInFlight
from jobboard.worker.signals import listen_for_signals
from jobboard.worker.stats import WorkerStats

STOP_CLAIM_WAIT = 2.0
"""Seconds a stopping worker still waits for the reply to a claim it sent."""

__all__ = ["Worker", "WorkerConfig", "WorkerStats", "default_owner"]

logger = logging.getLogger("jobboard.worker")


class Worker:
    """Runs ``handler`` on jobs from ``board``; see the module docstring.

    With a :class:`~jobboard.worker.handlers.Handlers` registry, only jobs whose names
    it handles are claimed (unless ``names`` says otherwise), and its hooks and
    middleware run before those given here.

    :raises Unsupported: ``config.prefetch`` on a board that cannot give a job back with its attempt uncounted.
    """

    def __init__(
        self, board: JobBoard, handler: Handler, config: WorkerConfig | None = None, *,
        names: Collection[str] | None = None, on_startup: Sequence[Hook] = (),
        on_shutdown: Sequence[Hook] = (), middleware: Sequence[Middleware] = (),
    ) -> None:
        self.board, self.handler = board, as_async(handler)
        self.config = config or WorkerConfig()
        registry = handler if isinstance(handler, Handlers) else None
        self.names = names if names is not None else (registry.names if registry is not None else None)
        self.on_startup = [*(registry.startup if registry else ()), *on_startup]
        self.on_shutdown = [*(registry.shutdown if registry else ()), *on_shutdown]
        self.shared: dict[str, Any] = {}
        """State shared by the hooks and every job (``ctx.shared``)."""
        self.stats = WorkerStats()
        self.running: dict[tuple[str, int], RunningJob] = {}
        """Jobs in hand by (job id, generation): after a lost reply, the same job may be claimed
        again while its earlier claim is still being settled."""
        self._slots = anyio.Semaphore(self.config.concurrency)
        self._stopping_since: float | None = None
        self._claiming = anyio.CancelScope()
        self._claim_scopes: set[anyio.CancelScope] = set()
        self._all_done = anyio.Event()
        self.started = anyio.Event()
        """Set once the worker is registered, its start-up hooks ran, and it is about to claim."""
        self._idler = Idler(board, self.names, self.config, self.stats)
        self._entity = WorkerEntity(board, self.config, self.names, self.stats, lambda: self._stopping)
        self._runner = JobRunner(board, self.handler, self.config, self.stats,
                                 [*(registry.middleware if registry else ()), *middleware], self.shared,
                                 lambda: self._stopping_since, names=self.names, take_next=self._take_next)
        self._burst = Burst(board, self.names, lambda: len(self.running), self._runner.retries_due_after)
        prefetch = self.config.prefetch
        self._fused = board.fuses_consume_and_claim and not prefetch  # with prefetch, claims fill what is held
        check_prefetch(board, prefetch)
        self._ahead = ClaimAhead(board, self.owner, self.names, prefetch) if prefetch else None
        self._settles = SettlesInFlight(prefetch) if prefetch else None
        """With held jobs, a slot starts the next one as soon as its job's settle is sent (:mod:`.settling`)."""
        self._cancel_new: str | None = None
        """Set once running jobs are cancelled (``stop(now=True)``, the drain's end): a job claimed by a
        consume after that is cancelled at once (and abandoned)."""

    @property
    def owner(self) -> str:
        return self.config.owner

    @property
    def _stopping(self) -> bool:
        return self._stopping_since is not None

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; running jobs get the grace period (``now``: none)."""
        if self._stopping_since is None:
            self._stopping_since = anyio.current_time()
        self._claiming.cancel()
        if self._ahead is not None:
            self._ahead.closing = True  # held jobs are given back, not started
        self._entity.registering.cancel()
        for scope in self._claim_scopes:
            self._hurry(scope)
        if now:
            self._cancel_new = "worker stopping now"
            for job in list(self.running.values()):
                job.cancel("worker stopping now")

    @staticmethod
    def _hurry(scope: anyio.CancelScope) -> None:
        """A claim in flight when the worker stops gets :data:`STOP_CLAIM_WAIT` more seconds (its
        reply is awaited so that a claim made is run, not lost; an outage must not hold the stop)."""
        scope.deadline = min(scope.deadline, anyio.current_time() + STOP_CLAIM_WAIT)

    async def run(self, *, handle_signals: bool = False) -> WorkerStats:
        """Work until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``; a second one stops at once).

        Runs the ``on_startup`` hooks first and the ``on_shutdown`` hooks last
        (also when the worker fails). A signal caught by
        :func:`~jobboard.worker.early_signals.catch_early_signals` before this stops
        the worker at once.

        :raises BoardClosed: the board was closed under the worker.
        """
        started = time.monotonic()
        try:
            async with anyio.create_task_group() as side:
                if handle_signals:
                    await side.start(listen_for_signals, self._on_signal)
                if self.config.scheduler:
                    side.start_soon(run_scheduler, self.board)
                try:
                    await self._work()
                finally:
                    side.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await self._run_hooks(self.on_shutdown, "on_shutdown")
        except BaseExceptionGroup as group:  # the promised BoardClosed, not the task groups' wrapping of it
            raise found_in(group, BoardClosed) or group from None
        logger.info("%s stopped after %.1fs: %s", self.owner, time.monotonic() - started, self.stats.summary())
        return self.stats

    async def _work(self) -> None:
        await self._run_hooks(self.on_startup, "on_startup")
        await self._entity.register()
        try:
            self.started.set()
            logger.info("%s claiming %s on %s (concurrency %d, prefetch %d)", self.owner,
                        ", ".join(sorted(self.names)) if self.names is not None else "every job",
                        self.board.url, self.config.concurrency, self.config.prefetch)
            async with anyio.create_task_group() as jobs:
                try:
                    await self._claim_loop(jobs)
                finally:  # jobs claimed ahead and not started go back at once
                    if self._ahead is not None:
                        await self._ahead.release_all(self.config.settle_timeout)
                        self.stats.released, self.stats.dropped = self._ahead.released, self._ahead.dropped
                await self._drain()
        finally:
            await self._entity.unregister()

    async def _run_hooks(self, hooks: Sequence[Hook], what: str) -> None:
        for hook in hooks:
            logger.debug("%s: running %s hook %s", self.owner, what, getattr(hook, "__qualname__", hook))
            await hook(self.shared)

    # -- claiming ----------------------------------------------------------------

    async def _claim_loop(self, jobs: TaskGroup) -> None:
        """``concurrency`` claimers: claiming takes round trips, so free slots fill in parallel."""
        with self._claiming:
            if self._stopping:
                return
            async with anyio.create_task_group() as claimers:
                for _ in range(self.config.concurrency):
                    claimers.start_soon(self._claimer, jobs)

    async def _claimer(self, jobs: TaskGroup) -> None:
        pace = ClaimerPace(Backoff(self.config.idle_backoff, self.config.idle_backoff_factor,
                                   self.config.idle_backoff_max, jitter=0.2))
        while not self._stopping:
            await self._slots.acquire()
            claim = None
            while claim is None and not self._stopping:  # the slot is kept while idle: see Idler.hand_over
                claim = await self._claim(pace)
            if claim is None:
                self._slots.release()
                continue
            pace.reset()
            self._start(claim, jobs)

    def _start(self, claim: Claim, jobs: TaskGroup) -> None:
        """Run a claimed job in its own task (its slot taken)."""
        self._runner.claimed(claim.job.id)
        self.stats.claimed += 1
        job = RunningJob(claim, self.config.lease, Guards(jobs))
        self.running[(claim.job.id, claim.generation)] = job
        jobs.start_soon(self._run_job, job, jobs)
        if self._cancel_new is not None:
            job.cancel(self._cancel_new)

    def _take_next(self) -> bool:
        """A job consumed now claims the next for its slot in the same backend call: the board fuses the two,
        a claimer waits for a slot (the worker is busy), and the worker goes on."""
        return self._fused and not self._stopping and self._slots.statistics().tasks_waiting > 0

    async def _claim(self, pace: ClaimerPace) -> Claim | None:
        try:
            fresh, pace.fresh = pace.fresh and not self._burst.looking, False  # share a fresh call in flight
            sent = self._burst.claim_sent(own_call=fresh or self._ahead is None)
            with anyio.CancelScope(shield=True):  # a claim made must not be lost to stop()
                with anyio.fail_after(self.config.settle_timeout) as scope:
                    self._claim_scopes.add(scope)
                    try:
                        if self._stopping:
                            self._hurry(scope)
                        claim = await (self._ahead.claim_next(fresh) if self._ahead is not None
                                       else self.board.claim_next(self.owner, names=self.names))
                    finally:
                        self._claim_scopes.discard(scope)
        except BoardClosed:
            raise
        except (JobBoardError, TimeoutError) as error:  # BackendUnavailable, or worse: never die of it
            self._burst.claim_returned(sent, False, failed=True)
            self._idler.hand_over(pace)  # it sleeps: another claimer waits on the board meanwhile
            if self._stopping:
                return None
            self.stats.backend_errors += 1
            delay = pace.backoff.next()
            log = logger.warning if isinstance(error, (BackendUnavailable, TimeoutError)) else logger.error
            log("%s: claiming failed (%s); retrying in %.1fs", self.owner, str(error) or type(error).__name__, delay)
            await anyio.sleep(delay)
            return None
        self._burst.claim_returned(sent, claim is not None)
        if claim is not None:
            self._idler.hand_over(pace)
        else:
            if self._stopping:
                return None
            if self.config.burst:
                await self._burst_idle(pace, sent)
            else:
                await self._idler.idle(pace)
        return claim

    async def _burst_idle(self, pace: ClaimerPace, sent: Sent) -> None:
        """Burst mode, after an empty answer to ``sent``: claim again at once if it may be stale
        (:meth:`Burst.claim_again`); stop once nothing is claimable, nothing runs and no retry of ours is due (a
        job this worker put back for a retry is waited for, so that a burst run finishes its own retries)."""
        pace.fresh = True  # whatever comes next, the next claim is a call of its own (unless one is looking)
        if self._burst.claim_again(sent):
            return
        if self._burst.done():
            logger.info("%s: nothing claimable is left (burst): stopping", self.owner)
            self.stop()
        else:
            await self._burst.idle()

    # -- running a job -------------------------------------------------------------

    async def _run_job(self, job: RunningJob, jobs: TaskGroup) -> None:
        handed = False  # with prefetch, the settle goes on in a task of its own: the slot does not wait for it

        async def settle_apart(settlement: Settlement, outcome: str) -> None:
            nonlocal handed
            assert self._settles is not None
            handed = True
            await self._settles.hand_off(jobs, partial(self._runner.settle, job, settlement, outcome),
                                         partial(self._ended, job))

        ran = False
        try:
            await self._runner.run(job, settle_apart if self._settles is not None else None)
            ran = True
        finally:
            # its consume claimed the next job, or a job is held ahead: the slot goes on to it (no claimer's turn)
            following = job.next_claim or (self._ahead.take_fresh() if ran and self._ahead else None)
            if following is not None:
                self._start(following, jobs)
            else:
                self._slots.release()
            if not handed:
                self._ended(job)

    def _ended(self, job: RunningJob) -> None:
        """``job`` is out of hand (settled, lost or given up): a burst claimer and a drain are told."""
        del self.running[(job.claim.job.id, job.claim.generation)]
        self._burst.job_ended()
        if not self.running:
            self._all_done.set()

    # -- shutdown and health --------------------------------------------------------

    async def _drain(self) -> None:
        """Give running jobs the grace period, then cancel (and abandon) the rest."""
        if self.running:
            logger.info("%s: draining: %d running job(s) get up to %ss to finish (a second SIGTERM: now)",
                        self.owner, len(self.running), self.config.grace_period)
            self._all_done = anyio.Event()
            with anyio.move_on_after(self.config.grace_period):
                await self._all_done.wait()
        self._cancel_new = f"worker stopped; grace period of {self.config.grace_period}s over"
        for job in list(self.running.values()):
            job.cancel(self._cancel_new)

    def _on_signal(self, number: int) -> None:
        name = signal.Signals(number).name
        if self._stopping:
            logger.warning("%s: %s received again: cancelling %d running job(s) now", self.owner, name,
                           len(self.running))
        else:
            logger.info("%s: %s received: stopping (no new claims)", self.owner, name)
        self.stop(now=self._stopping)
