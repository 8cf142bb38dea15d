"""How an idle worker waits: in ``board.wait()``, one claimer at a time, waking at least every ``idle_backoff_max``."""

from __future__ import annotations

import logging
from collections.abc import Collection

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BoardClosed, JobBoardError
from jobboard.worker.config import WorkerConfig
from jobboard.worker.retry import Backoff

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.worker.conductor import WorkerStats

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

    def reset(self) -> None:
        """Back to full speed: a job was claimed, or the board really waited."""
        self.backoff.reset()
        self.misses = 0
        self.offered = False


class Idler:
    """The idle wait of one worker's claimers (one waits on the board, the others wait for it)."""

    def __init__(self, board: JobBoard, names: Collection[str] | None, config: WorkerConfig,
                 stats: WorkerStats) -> None:
        self.board, self.names, self.config, self.stats = board, names, config, stats
        self._waiting_on_board = False
        self._work_maybe = anyio.Event()
        """Set when the claimer waiting on the board wakes up: the others try to claim too."""

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
        started = anyio.current_time()
        if self._waiting_on_board:  # one claimer waits on the board; the others wait for it
            with anyio.move_on_after(self.config.idle_backoff_max):
                await self._work_maybe.wait()
            return
        self._waiting_on_board = True
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
        finally:
            self._waiting_on_board = False
            woken, self._work_maybe = self._work_maybe, anyio.Event()
            woken.set()
        if found and anyio.current_time() - started < BLOCKED:
            pace.misses += 1
        else:  # it really waited: new work came (or none), this is no spin
            pace.reset()
        pace.offered = found
