"""Claim-ahead (``WorkerConfig.prefetch``): a worker's claimers hold up to ``prefetch`` jobs claimed but not
started, taken with the claim that fills a slot (``board.claim_many``: one call on a backend that has it,
else a claim each).

The jobs held ahead are claims of the board's session like any other: the session's heartbeat keeps them,
the owner's death returns them (their attempt counted: a held job never started has then used one), and
they count as running for flow control. Before a held claim is handed to a slot it is checked
(``Backend.claim_lost``: what the board knows, else one read): one cancelled, settled elsewhere or of a
lost session is dropped, not started. They are counted in
:class:`~jobboard.worker.conductor.WorkerStats` ``claimed`` when they start; at the worker's stop the
unstarted ones are given back (``board.release``: claimable at once, the attempt uncounted), so none waits
for a session timeout. A worker refuses ``prefetch`` on a board whose release cannot uncount the attempt
(:func:`check_prefetch`). The cost is fairness: a job held here waits for this worker's next free slot
while another worker may be idle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost, JobBoardError, NotOwner, Unsupported
from jobboard.job import Claim

logger = logging.getLogger("jobboard.worker")


def check_prefetch(board: JobBoard, prefetch: int) -> None:
    """:raises Unsupported: ``prefetch`` > 0 on a board whose ``release`` would count an attempt."""
    if prefetch and not board.releases_uncounted:
        raise Unsupported(
            f"prefetch {prefetch} needs a board that gives a job back unstarted with its attempt uncounted; "
            f"{type(board.backend).__name__} ({board.url.split(':', 1)[0]}://) cannot (each stop would cost every "
            "held job an attempt): run this worker without prefetch")


class ClaimAhead:
    """One worker's claims held ahead (at most ``prefetch``, reservations of calls in flight included).

    Atomic by the event loop: the count of jobs a call may bring back is reserved before its await, so
    claimers claiming at once never hold more than ``prefetch`` between them."""

    def __init__(self, board: JobBoard, owner: str, names: Collection[str] | None, prefetch: int) -> None:
        self.board, self.owner, self.names, self.prefetch = board, owner, names, prefetch
        self.held: deque[Claim] = deque()
        self._reserved = 0
        self.released = 0
        """Held claims given back at the stop."""
        self.dropped = 0
        """Held claims found lost (cancelled, settled elsewhere, their session lost) before they started."""

    async def claim_next(self) -> Claim | None:
        """The oldest held claim still current, else a claim call for one slot plus what room is left ahead.

        :raises JobBoardError: as ``board.claim_next`` (nothing is held from a failed call)."""
        while self.held:
            claim = self.held.popleft()
            if await self._current(claim):
                return claim
        ahead = max(0, self.prefetch - len(self.held) - self._reserved)
        self._reserved += ahead
        try:
            claims = await self.board.claim_many(self.owner, 1 + ahead, names=self.names)
        finally:
            self._reserved -= ahead
        self.held.extend(claims[1:])
        return claims[0] if claims else None

    async def _current(self, claim: Claim) -> bool:
        """Whether ``claim`` may start: not known lost (a check that fails says yes: the runner's claim
        watcher and the settle will tell). Cancelled meanwhile, the claim stays held (given back at the stop)."""
        try:
            why = await self.board.backend.claim_lost(claim)
        except (JobBoardError, TimeoutError):
            return True
        except BaseException:
            self.held.appendleft(claim)
            raise
        if why is not None:
            self.dropped += 1
            logger.info("%s: job %s claimed ahead is not started (%s)", self.owner, claim.job.id, why)
        return why is None

    async def release_all(self, within: float) -> None:
        """Give back every held claim (shielded, bounded by ``within`` seconds in all): claimable again at
        once. Ones that cannot be given back return when the session ends; once the board is found
        unreachable the rest are not tried (each would wait out its own retry window: a stop during an outage
        took 10 s per held job)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            while self.held:
                claim = self.held.popleft()
                try:
                    await self.board.release(claim)
                    self.released += 1
                except (ClaimLost, NotOwner):
                    pass  # revoked or lost while held: nothing to give back
                except BackendUnavailable as error:
                    self.held.appendleft(claim)
                    logger.warning("%s: could not give back job %s claimed ahead (%s): the board is unreachable, "
                                   "the others are not tried", self.owner, claim.job.id, error)
                    break
                except JobBoardError as error:
                    logger.warning("%s: could not give back job %s claimed ahead (%s): it returns when the "
                                   "board's session ends", self.owner, claim.job.id, error)
        if self.held:
            logger.warning("%s: %d job(s) claimed ahead not given back: they return when the board's session "
                           "ends", self.owner, len(self.held))
