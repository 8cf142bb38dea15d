"""Burst mode (``WorkerConfig(burst=True)``): when a worker that stops once nothing is left stops, and which of
its idle claimers looks at the board again.

A claimer whose claim came back empty waits here. Only something that may have made work claimable sends
one waiting claimer back to the board: a job of this worker that ended (its consume may have readied a
dependent, its retry may come due), or a claim that got a job (there may be more). Another claimer's empty
claim sends none: when every claimer woke at each claim that came back, sixteen claimers kept one another
claiming an empty board for as long as any claim was in flight (0.4-17.7 empty claims a job on redis://, and
a run that never stopped, ``tests/worker/test_idle.py``). An empty answer to a claim sent before a job of
this worker ended is stale (the job may have readied work after the board answered): its claimer claims
again at once, with a call of its own, unless a call of another claimer's own sent since that end is in
flight (it looks for them; without that, with work that ends about as often as a claim is answered, every
answer was stale and every claimer kept claiming: 11-14 claims a job). The claimer whose fresh claim came back last, with nothing running
and no retry of its own due, stops the worker. Dependents readied together are claimed one after another
(each claim that gets one sends one more claimer), not all at once.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import JobBoardError

RETRY_SLACK = 1.0
"""Seconds a burst worker waits past a retry's due time for the board to offer the job; also the longest a
waiting claimer sleeps before it looks again."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One claim's send: how many of the worker's jobs had ended then, and whether it is a call of its own
    (not one sharing another claimer's call in flight, whose answer may be older)."""

    jobs_ended: int
    own_call: bool


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
        self.looking = 0
        """Calls of claimers' own in flight, sent since the last job ended: their answers are not stale."""
        self._waiting: deque[anyio.Event] = deque()

    def claim_sent(self, own_call: bool) -> Sent:
        """A claim is being sent (``own_call``: surely a call of its own): what :meth:`claim_returned` and
        :meth:`claim_again` are to be told once it is answered."""
        self.claims_in_flight += 1
        self.looking += own_call
        return Sent(self.jobs_ended, own_call)

    def claim_again(self, sent: Sent) -> bool:
        """Whether an empty answer to ``sent`` must be checked by claiming again at once: a job ended since
        it was sent (the answer may predate the work that job's end readied) and no call of another
        claimer's own sent since then is in flight to find it."""
        return self.jobs_ended != sent.jobs_ended and not self.looking

    def job_ended(self) -> None:
        """A job of this worker ended: its consume may have readied work, its retry may come due."""
        self.jobs_ended += 1
        self.looking = 0  # the calls in flight were sent before this end
        self.wake_one()

    def claim_returned(self, sent: Sent, got_a_job: bool, failed: bool = False) -> None:
        """A claim came back: one that got a job sends one waiting claimer to look for more, and so does one
        that ``failed`` while it was looking (a claimer may have deferred to it, and it now backs off)."""
        self.claims_in_flight -= 1
        was_looking = sent.own_call and sent.jobs_ended == self.jobs_ended
        self.looking -= was_looking
        if got_a_job or (failed and was_looking):
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
