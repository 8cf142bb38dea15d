"""Claim-ahead (``WorkerConfig.prefetch``): a worker's claimers hold up to ``prefetch`` jobs claimed but not
started, taken with the claim that fills a slot (``board.claim_many``: one call on a backend that has it,
else a claim each).

The jobs held ahead are claims of the board's session like any other: the session's heartbeat keeps them,
the owner's death returns them (their attempt counted: a held job never started has then used one), and
they count as running for flow control. A held claim known current less than :data:`HELD_FRESH` seconds ago
(its claim call's reply, or the last check) starts with no read: it has the race of any claim started as its
reply arrives (a cancel meanwhile is met by the runner's claim watcher). One known current longer ago is
checked first, together with every other held claim (``Backend.claim_lost``, all at once: on redis:// their
reads go out in one write): one cancelled, settled elsewhere or of a lost session is dropped, not started. So a
held job cancelled :data:`HELD_FRESH` seconds or more before a slot would start it is not started. They are
counted in :class:`~jobboard.worker.stats.WorkerStats` ``claimed`` when they start; at the worker's stop the
unstarted ones are given back (``board.release``: claimable at once, the attempt uncounted), so none waits
for a session timeout. A worker refuses ``prefetch`` on a board whose release cannot uncount the attempt
(:func:`check_prefetch`). The cost is fairness: a job held here waits for this worker's next free slot
while another worker may be idle.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Collection

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost, JobBoardError, NotOwner, Unsupported
from jobboard.job import Claim

logger = logging.getLogger("jobboard.worker")

HELD_FRESH = 0.25
"""Seconds a held claim starts without a read after it was last known current (a claim call's reply is a
claim's reply latency on a busy machine, the race every claim started at once has); older ones are checked."""


def check_prefetch(board: JobBoard, prefetch: int) -> None:
    """:raises Unsupported: ``prefetch`` > 0 on a board whose ``release`` would count an attempt."""
    if prefetch and not board.releases_uncounted:
        raise Unsupported(
            f"prefetch {prefetch} needs a board that gives a job back unstarted with its attempt uncounted; "
            f"{type(board.backend).__name__} ({board.url.split(':', 1)[0]}://) cannot (each stop would cost every "
            "held job an attempt): run this worker without prefetch")


class Arrival:
    """The end of one claim call, for the claimers waiting for its jobs: ``short`` if it brought fewer than it
    asked for (nothing more is claimable now)."""

    __slots__ = ("ended", "short")

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.short = False


def key(claim: Claim) -> tuple[str, int]:
    """A claim's job and generation (a claim itself is not hashable)."""
    return claim.job.id, claim.generation


class ClaimAhead:
    """One worker's claims held ahead (at most ``prefetch``, reservations of calls in flight included).

    Atomic by the event loop: the count of jobs a call may bring back is reserved before its await, so
    claimers claiming at once never hold more than ``prefetch`` between them, and a claimer that finds nothing
    held waits for a call in flight rather than make one, while that call brings one for it; one check of the held claims
    runs at a time (the others wait for it), and a claim is taken off ``held`` only once it may start."""

    def __init__(self, board: JobBoard, owner: str, names: Collection[str] | None, prefetch: int) -> None:
        self.board, self.owner, self.names, self.prefetch = board, owner, names, prefetch
        self.held: deque[Claim] = deque()
        self._known_at: dict[tuple[str, int], float] = {}
        """When each held claim (by :func:`key`) was last known current (``anyio.current_time()``)."""
        self._reserved = 0
        """Jobs the claim calls in flight may bring beyond their own slot's."""
        self._awaiting = 0
        """Claimers waiting for those (each takes one)."""
        self._arrival = Arrival()
        """What the claimers waiting now wait for: the end of the next claim call to end."""
        self._checking: anyio.Event | None = None
        self.released = 0
        """Held claims given back at the stop."""
        self.dropped = 0
        """Held claims found lost (cancelled, settled elsewhere, their session lost) before they started."""
        self.checks = 0
        """Checks of the held claims made (each reads every held claim, at once)."""
        self.closing = False
        """The worker is stopping: no held claim is taken any more (they are given back), nor a call made."""

    async def claim_next(self, fresh: bool = False) -> Claim | None:
        """The oldest held claim still current (checked first, with the others, once not known current for
        :data:`HELD_FRESH` s); else, while a claim call in flight brings more jobs than the claimers already
        waiting for it, one of those (its reply comes sooner than a call of our own would), unless ``fresh``
        (the answer must be newer than now: a call in flight may predate a job just readied); else a claim call
        for one slot plus what room is left ahead.

        Once :attr:`closing`, ``None`` (a claimer waiting for a call in flight when the worker stops takes none
        of its held jobs: they are given back).

        :raises JobBoardError: as ``board.claim_next`` (nothing is held from a failed call)."""
        while True:
            while self.held and not self.closing:
                if self._checking is not None:
                    await self._checking.wait()
                elif not self._first_fresh():
                    await self._check_held()
                else:
                    return self._take()
            if self.closing:
                return None
            if fresh or self._reserved <= self._awaiting:
                return await self._claim_call()
            self._awaiting += 1
            arrival = self._arrival
            try:
                await arrival.ended.wait()
            finally:
                self._awaiting -= 1
            if arrival.short and not self.held:  # a call made since we asked found nothing more: none now
                return None

    def take_fresh(self) -> Claim | None:
        """The oldest held claim if it may start with no read (known current less than :data:`HELD_FRESH` s
        ago, no check running), taken; else ``None`` (a claimer's :meth:`claim_next` checks, or calls)."""
        if self.held and self._checking is None and not self.closing and self._first_fresh():
            return self._take()
        return None

    def _first_fresh(self) -> bool:
        """Whether the oldest held claim was known current less than :data:`HELD_FRESH` s ago."""
        return anyio.current_time() - self._known_at[key(self.held[0])] < HELD_FRESH

    async def _claim_call(self) -> Claim | None:
        """``claim_many`` of one and the room left ahead (reserved while in flight); the rest held."""
        ahead = max(0, self.prefetch - len(self.held) - self._reserved)
        self._reserved += ahead
        short = False
        try:
            claims = await self.board.claim_many(self.owner, 1 + ahead, names=self.names)
            self._hold(claims[1:], anyio.current_time())
            short = len(claims) < 1 + ahead
        finally:
            self._reserved -= ahead
            arrival, self._arrival = self._arrival, Arrival()
            arrival.short = short
            arrival.ended.set()  # the claimers waiting look again (after a failed call: they call)
        return claims[0] if claims else None

    def _take(self) -> Claim:
        claim = self.held.popleft()
        del self._known_at[key(claim)]
        return claim

    def _hold(self, claims: Collection[Claim], known_at: float) -> None:
        for claim in claims:
            self._known_at[key(claim)] = known_at
        self.held.extend(claims)

    async def _check_held(self) -> None:
        """Read every held claim at once; drop the lost ones, the others known current as of the replies (as a
        claim call's are). A read that fails says current (the runner's claim watcher and the settle will tell).
        Cancelled meanwhile, every claim stays held (given back at the stop)."""
        checking = self._checking = anyio.Event()
        batch = list(self.held)
        lost: dict[tuple[str, int], str] = {}

        async def check(claim: Claim) -> None:
            with contextlib.suppress(JobBoardError, TimeoutError):
                if (why := await self.board.backend.claim_lost(claim)) is not None:
                    lost[key(claim)] = why

        try:
            self.checks += 1
            async with anyio.create_task_group() as reads:
                for claim in batch:
                    reads.start_soon(check, claim)
        finally:
            self._checking = None
            checking.set()
        now = anyio.current_time()
        for claim in batch:
            if key(claim) in self._known_at:  # still held (the release at the stop may have taken it)
                self._known_at[key(claim)] = now
        for claim in [claim for claim in self.held if key(claim) in lost]:
            self.held.remove(claim)
            del self._known_at[key(claim)]
            self.dropped += 1
            logger.info("%s: job %s claimed ahead is not started (%s)", self.owner, claim.job.id, lost[key(claim)])

    async def release_all(self, within: float) -> None:
        """Give back every held claim (shielded, bounded by ``within`` seconds in all): claimable again at
        once. Ones that cannot be given back return when the session ends; once the board is found
        unreachable the rest are not tried (each would wait out its own retry window: a stop during an outage
        took 10 s per held job)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            while self.held:
                claim = self._take()
                try:
                    await self.board.release(claim)
                    self.released += 1
                except (ClaimLost, NotOwner):
                    pass  # revoked or lost while held: nothing to give back
                except BackendUnavailable as error:
                    self.held.appendleft(claim)
                    self._known_at[key(claim)] = 0.0
                    logger.warning("%s: could not give back job %s claimed ahead (%s): the board is unreachable, "
                                   "the others are not tried", self.owner, claim.job.id, error)
                    break
                except JobBoardError as error:
                    logger.warning("%s: could not give back job %s claimed ahead (%s): it returns when the "
                                   "board's session ends", self.owner, claim.job.id, error)
        if self.held:
            logger.warning("%s: %d job(s) claimed ahead not given back: they return when the board's session "
                           "ends", self.owner, len(self.held))
