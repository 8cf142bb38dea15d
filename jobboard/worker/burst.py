"""Burst mode (``WorkerConfig(burst=True)``): when a worker that stops once nothing is left stops, and which of
its idle claimers looks at the board again.

A claimer whose claim came back empty waits here. Only something that may have made work claimable sends
one waiting claimer back to the board: a job of this worker that ended (its consume may have readied a
dependent, its retry may come due), or a claim that got a job (there may be more). Another claimer's empty
claim sends none: when every claimer woke at each claim that came back, sixteen claimers kept one another
claiming an empty board for as long as any claim was in flight (0.4-17.7 empty claims a job on redis://, and
a run that never stopped, ``tests/worker/test_idle.py``). An empty answer to a claim sent before a job of
this worker ended is stale (the job may have readied work after the board answered): its claimer claims
again at once, with a call of its own. The claimer whose fresh claim came back last, with nothing running
and no retry of its own due, stops the worker. Dependents readied together are claimed one after another
(each claim that gets one sends one more claimer), not all at once.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Collection

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import JobBoardError

RETRY_SLACK = 1.0
"""Seconds a burst worker waits past a retry's due time for the board to offer the job; also the longest a
waiting claimer sleeps before it looks again."""


class Burst:
    """The claims in flight and the waiting claimers of one burst worker."""

    def __init__(self, board: JobBoard, names: Collection[str] | None, jobs_in_hand: Callable[[], int],
                 retries_due_after: Callable[[float], list[float]]) -> None:
        self.board, self.names = board, names
        self._jobs_in_hand = jobs_in_hand
        self._retries_due_after = retries_due_after
        self.claims_in_flight = 0
        """Claims being made: the worker does not stop while one may still bring a job."""
        self.jobs_ended = 0
        """Jobs of this worker that ended (settled, lost or given up) so far."""
        self._waiting: deque[anyio.Event] = deque()

    def claim_sent(self) -> int:
        """A claim is being sent: what :meth:`stale` is to be asked with once it is answered."""
        self.claims_in_flight += 1
        return self.jobs_ended

    def stale(self, sent_at: int) -> bool:
        """Whether a job ended since the claim was sent (``sent_at``: :meth:`claim_sent`'s answer): an empty
        answer may then predate the work that job's end readied."""
        return self.jobs_ended != sent_at

    def job_ended(self) -> None:
        """A job of this worker ended: its consume may have readied work, its retry may come due."""
        self.jobs_ended += 1
        self.wake_one()

    def claim_returned(self, got_a_job: bool) -> None:
        """A claim came back (or failed): one that got a job sends one waiting claimer to look for more."""
        self.claims_in_flight -= 1
        if got_a_job:
            self.wake_one()

    def wake_one(self) -> None:
        """Something may have become claimable (a job ended, a claim got one): one waiting claimer looks."""
        if self._waiting:
            self._waiting.popleft().set()

    def done(self) -> bool:
        """Nothing is left for this worker: nothing runs, no claim is in flight, no retry of its own is due."""
        now = anyio.current_time()
        return not (self._jobs_in_hand() or self.claims_in_flight or self._retries_due_after(now - RETRY_SLACK))

    async def idle(self) -> None:
        """After an empty, fresh claim: wait until this claimer should look again (woken, a retry of ours due,
        or :data:`RETRY_SLACK` passed). Call :meth:`done` first: the worker stops then instead."""
        now = anyio.current_time()
        later = [at for at in self._retries_due_after(now - RETRY_SLACK) if at > now]
        with anyio.move_on_after(min(later) - now if later else RETRY_SLACK):
            if later or self._jobs_in_hand() or self.claims_in_flight:
                woken = anyio.Event()
                self._waiting.append(woken)
                try:
                    await woken.wait()
                finally:
                    if not woken.is_set():
                        self._waiting.remove(woken)
            else:  # a retry is due: wait for the board to offer it (or for the slack to pass)
                with contextlib.suppress(JobBoardError, TimeoutError):
                    await self.board.wait(names=self.names)
