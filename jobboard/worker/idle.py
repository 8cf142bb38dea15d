"""How an idle worker waits: one claimer in ``board.wait()``, the others behind it, each woken alone."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BoardClosed, JobBoardError
from jobboard.worker.config import WorkerConfig
from jobboard.worker.retry import Backoff

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.worker.stats import WorkerStats

logger = logging.getLogger("jobboard.worker")

SPIN_MISSES = 3
"""Immediate wake-ups with nothing claimable before the worker starts backing off."""
BLOCKED = 0.005
"""A wait() that took longer than this (seconds) really slept."""


class ClaimerPace:
    """One claimer's pace: its back-off (after errors, and in a spin) and whether it is spinning."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.misses = 0
        """Immediate wake-ups in a row that found nothing to claim (see :meth:`Idler.idle`)."""
        self.offered = False
        """The last idle wait ended with the board offering work (a claim finding none then lost a race)."""
        self.fresh = False
        """The next claim is a call of this claimer's own, sent now (a burst worker's: see :mod:`.burst`)."""

    def reset(self) -> None:
        """Back to full speed: a job was claimed, or the board really waited."""
        self.backoff.reset()
        self.misses = 0
        self.offered = False


class Idler:
    """The idle wait of one worker's claimers: one *holds the board* (waits in ``board.wait()``, then claims),
    the others follow. A claim that gets a job hands the board to one follower, so a post wakes one claimer of
    the process, not every idle one (no herd: one claim attempt per job, not ``concurrency``)."""

    def __init__(self, board: JobBoard, names: Collection[str] | None, config: WorkerConfig,
                 stats: WorkerStats) -> None:
        self.board, self.names, self.config, self.stats = board, names, config, stats
        self._holder: ClaimerPace | None = None
        """The claimer that waits on the board, from its wait until its claim gets a job (or fails)."""
        self._followers: deque[anyio.Event] = deque()
        """The other idle claimers, in the order they came: :meth:`hand_over` wakes the first."""

    async def idle(self, pace: ClaimerPace) -> None:
        """Sleep in ``board.wait()`` until there is work, waking at least every ``idle_backoff_max``.

        Losing a race for a job is normal (another worker was faster) and costs
        no sleep. Only a spin backs off: ``wait()`` saying at once, several times
        in a row, that there is work which claiming then does not find.
        """
        if pace.offered:  # the board offered work, and the claim since found none
            self.stats.claim_races += 1
            pace.offered = False
        if pace.misses >= SPIN_MISSES:
            await anyio.sleep(pace.backoff.next())
        while self._holder not in (None, pace):
            await self._follow()
        self._holder = pace
        started = anyio.current_time()
        found = False  # stays False when the wait times out: an idle board is no error
        try:
            with anyio.move_on_after(self.config.idle_backoff_max):
                found = bool(await self.board.wait(names=self.names))
        except BoardClosed:
            raise
        except (JobBoardError, TimeoutError) as error:  # BackendUnavailable, or worse: never die of it
            self.stats.backend_errors += 1
            delay = pace.backoff.next()
            logger.warning("%s: board unavailable while idle (%s); retrying in %.1fs", self.config.owner,
                           str(error) or type(error).__name__, delay)
            await anyio.sleep(delay)
            return
        if found and anyio.current_time() - started < BLOCKED:
            pace.misses += 1
        else:  # it really waited: new work came (or none), this is no spin
            pace.reset()
        pace.offered = found

    def hand_over(self, pace: ClaimerPace) -> None:
        """``pace``'s claim got a job (or failed): if it held the board, one follower takes the board over
        (and finds at once any further work). Atomic: no await between the check and the wake. The
        holder keeps its slot from its wait to its claim (``Worker._claimer``), so that it cannot be
        held up between the two while the others follow."""
        if self._holder is pace:
            self._holder = None
            if self._followers:
                self._followers.popleft().set()

    async def _follow(self) -> None:
        """Wait to be handed the board (or ``idle_backoff_max``, then look again)."""
        woken = anyio.Event()
        self._followers.append(woken)
        try:
            with anyio.move_on_after(self.config.idle_backoff_max):
                await woken.wait()
        finally:
            if not woken.is_set():
                self._followers.remove(woken)
