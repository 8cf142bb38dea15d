"""How a worker behaves: :class:`WorkerConfig` (re-exported by :mod:`jobboard.worker`)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jobboard.worker.retry import RetryPolicy


def default_owner() -> str:
    """``host-pid-random``: unique per worker process and instance."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker behaves. Every duration is in seconds."""

    owner: str = field(default_factory=default_owner)
    concurrency: int = 1
    """Jobs in flight at once."""
    prefetch: int = 0
    """Jobs the worker may hold claimed ahead, not yet started (:mod:`jobboard.worker.ahead`): a claim for
    a free slot claims up to this many more in the same call (``board.claim_many``). Each waits for this
    worker's next free slot, even while another worker is idle; at the stop the unstarted ones are given
    back at once (``board.release``). 0: none (and a consume claims the slot's next job in its own call)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """What happens to a job whose handler fails (a handler's own policy wins): by default
    at most 5 attempts, 1 s, 2 s, 4 s, 8 s apart (with jitter), then the trash."""
    timeout: float | None = None
    """Seconds a handler may run before it is cancelled (a handler's or job's own timeout wins)."""
    idle_backoff: float = 0.1
    idle_backoff_factor: float = 1.5
    idle_backoff_max: float = 10.0
    """An idle worker sleeps in ``board.wait()``, waking at least every ``idle_backoff_max``;
    it backs off (zk-plan's defaults) when the board says there is work that it then
    fails to claim, or when the board is unavailable."""
    grace_period: float = 30.0
    """On shutdown, how long running jobs may take before they are cancelled and abandoned."""
    lease: float | None = None
    """Seconds a claim may go unrenewed before this worker gives it up as lost."""
    lease_renewal: Literal["auto", "heartbeat"] = "auto"
    """``auto``: the worker renews while the handler runs (catches a blocked event
    loop); ``heartbeat``: only ``ctx.heartbeat()`` renews (catches a hung handler)."""
    settle_timeout: float = 30.0
    """Bound on each claim or settle call; one that takes longer is retried."""
    burst: bool = False
    """Stop (``run()`` returns) once nothing claimable is left and no job is running."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Published with the worker's entity registration."""
    scheduler: bool = False
    """Also post the board's periodic jobs (:mod:`jobboard.schedules.scheduler`), beside the claim loop.
    Turn it on in several workers: each period is still posted once, and no single one is needed."""

    def __post_init__(self) -> None:
        for name, least in (("concurrency", 1), ("prefetch", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be a whole number, not {value!r}")
            if value < least:
                raise ValueError(f"{name} must be at least {least}" if least else f"{name} must be 0 or more")
        if self.lease is not None and self.lease <= 0:
            raise ValueError("lease must be a positive number of seconds")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if self.idle_backoff_max <= 0 or self.settle_timeout <= 0:
            raise ValueError("idle_backoff_max and settle_timeout must be positive")
