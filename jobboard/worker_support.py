"""Small pieces of the worker: back-off, a running job's state, counters."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from jobboard.job import Claim
from jobboard.outcome import Action


class Backoff:
    """Exponential delays: ``initial``, then ×``factor`` each time, at most ``maximum``."""

    def __init__(self, initial: float, factor: float, maximum: float) -> None:
        self.initial, self.factor, self.maximum = initial, factor, maximum
        self.attempts = 0
        self.misses = 0
        """Immediate wake-ups that found nothing to claim (see ``Worker._idle``)."""

    def next(self) -> float:
        delay = min(self.maximum, self.initial * self.factor ** self.attempts)
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0
        self.misses = 0


class RunningJob:
    """One claimed job while its handler runs: its cancel scope, lease and fate."""

    def __init__(self, claim: Claim, lease: float | None) -> None:
        self.claim = claim
        self.lease = lease
        self.scope = anyio.CancelScope()
        self.lost: str | None = None
        self.cancelled_because = ""
        self._renewed_at = anyio.current_time()

    def heartbeat(self) -> None:
        self._renewed_at = anyio.current_time()

    def lease_left(self) -> float:
        assert self.lease is not None
        return self._renewed_at + self.lease - anyio.current_time()

    def lose(self, reason: str) -> None:
        """The claim is gone: cancel the handler; the job is not settled here."""
        if self.lost is None:
            self.lost = reason
        self.scope.cancel()

    def cancel(self, reason: str) -> None:
        """Cancel the handler (shutdown); the job is abandoned."""
        self.cancelled_because = reason
        self.scope.cancel()


@dataclass
class WorkerStats:
    """What a worker did."""

    claimed: int = 0
    consumed: int = 0
    abandoned: int = 0
    trashed: int = 0
    lost: int = 0
    """Jobs whose claim was lost while they ran (or before they settled)."""
    abandoned_on_shutdown: int = 0
    backend_errors: int = 0

    def count(self, action: Action) -> None:
        if action is Action.CONSUME:
            self.consumed += 1
        elif action is Action.ABANDON:
            self.abandoned += 1
        else:
            self.trashed += 1
