"""A worker's entity on its board: registered as it starts (transient errors ridden out until it
stops), unregistered as it ends (best effort, briefly)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Collection
from typing import Any

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard.worker.config import WorkerConfig
from jobboard.worker.retry import Backoff

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.worker.stats import WorkerStats

UNREGISTER_TIMEOUT = 2.0
"""Seconds a stopping worker tries to unregister its entity."""

logger = logging.getLogger("jobboard.worker")


class WorkerEntity:
    """One worker's entity (named by its owner), on the worker's board."""

    def __init__(self, board: JobBoard, config: WorkerConfig, names: Collection[str] | None, stats: WorkerStats,
                 stopping: Callable[[], bool]) -> None:
        self.board, self.config, self.names, self.stats = board, config, names, stats
        self._stopping = stopping
        self.registering = anyio.CancelScope()
        """Cancelled when the worker stops: a registration still being tried ends."""

    def metadata(self) -> dict[str, Any]:
        """Who the worker is: host, pid, concurrency, the names it claims, when it started, and the config's."""
        return {"host": socket.gethostname(), "pid": os.getpid(), "concurrency": self.config.concurrency,
                "names": sorted(self.names) if self.names is not None else None,
                "started_at": time.time(), **self.config.metadata}

    async def register(self) -> None:
        """Register the worker's entity, riding out transient errors (``stop()`` ends the attempts)."""
        backoff = Backoff(self.config.idle_backoff, 2.0, self.config.idle_backoff_max, jitter=0.2)
        with self.registering:
            while not self._stopping():
                try:
                    with anyio.fail_after(self.config.settle_timeout):
                        await self.board.register_entity(self.config.owner, self.metadata())
                    return
                except (BackendUnavailable, TimeoutError) as error:
                    self.stats.backend_errors += 1
                    delay = backoff.next()
                    logger.warning("%s: could not register (%s); retrying in %.1fs", self.config.owner,
                                   str(error) or type(error).__name__, delay)
                    await anyio.sleep(delay)

    async def unregister(self) -> None:
        """Best effort, briefly: the entity goes with the board's session anyway (ZooKeeper's
        ephemeral node, Redis' reaped session), so a stopping worker never waits out an outage."""
        with anyio.CancelScope(shield=True):
            try:
                if self.board.is_open:
                    with anyio.fail_after(min(self.config.settle_timeout, UNREGISTER_TIMEOUT)):
                        await self.board.unregister_entity(self.config.owner)
            except (JobBoardError, TimeoutError) as error:
                logger.warning("%s: could not unregister: %s", self.config.owner, str(error) or "the board did not answer "
                               "in time (the entity goes with the board's session)")
