"""Progress reports from a running handler, coalesced: at most one board write per interval per job.

``JobContext.progress`` only records the latest value (from the event loop or a handler's
thread); :meth:`ProgressReporter.run`, beside the handler, writes it when it changed, at most
once per :data:`PROGRESS_INTERVAL`. So a handler may report as often as it likes; the last
value reaches the board within the interval while the claim holds, and a value still
pending when the handler returns goes with the settle (which removes the claim's progress).
"""

from __future__ import annotations

import logging
import time

import anyio

from jobboard.board.checks import check_progress
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost, JobBoardError, NotOwner, Unsupported
from jobboard.job import Claim, Progress

logger = logging.getLogger("jobboard.worker")

PROGRESS_INTERVAL = 1.0
"""Seconds between two progress writes of one job, at least."""


class ProgressReporter:
    """The latest progress of one claim and the task that writes it; see the module docstring."""

    def __init__(self, board: JobBoard, claim: Claim, interval: float = PROGRESS_INTERVAL) -> None:
        self.board, self.claim, self.interval = board, claim, interval
        self._latest: Progress | None = None
        self._written: Progress | None = None
        self.writes = 0
        """Progress writes made so far (for tests and benchmarks)."""
        self._stopped = False

    def report(self, fraction: float, note: str = "") -> None:
        """Record the latest progress (thread-safe: one assignment).

        :raises InvalidJob: ``fraction`` not in 0..1, or ``note`` not a string.
        """
        self._latest = check_progress(fraction, note, time.time())

    async def run(self) -> None:
        """Write the latest progress when it changed, at most once per interval, until cancelled."""
        while not self._stopped:
            latest = self._latest
            if latest is not None and latest is not self._written:
                await self._write(latest)
                await anyio.sleep(self.interval)
            else:
                await anyio.sleep(min(self.interval, 0.1))

    async def _write(self, progress: Progress) -> None:
        try:
            await self.board.report_progress(self.claim, progress.fraction, progress.note)
        except BackendUnavailable as error:  # the next turn tries again with the latest value
            logger.debug("progress of job %s not written: %s", self.claim.job.id, error)
            return
        except (ClaimLost, NotOwner):  # the claim watch cancels the handler
            self._stopped = True
            return
        except Unsupported:
            logger.info("this board does not store progress; job %s's reports are ignored", self.claim.job.id)
            self._stopped = True
            return
        except JobBoardError as error:
            logger.warning("progress of job %s not written: %s", self.claim.job.id, error)
        self._written = progress
        self.writes += 1
