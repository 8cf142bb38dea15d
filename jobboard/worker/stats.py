"""What a worker did: :class:`WorkerStats`, each claimed job counted in exactly one of :data:`OUTCOMES`."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["OUTCOMES", "WorkerStats"]

OUTCOMES = ("consumed", "retried", "failed", "lost", "cancelled", "abandoned_on_shutdown", "unsettled")
"""Every claimed job ends in exactly one of these (see :class:`WorkerStats`)."""


@dataclass
class WorkerStats:
    """What a worker did. Once ``run()`` returned, ``claimed`` is the sum of the outcomes."""

    claimed: int = 0
    consumed: int = 0
    retried: int = 0
    """Failed (or asked to :class:`~jobboard.worker.retry.Retry`) and put back for a later attempt."""
    failed: int = 0
    """Trashed: out of attempts, not retryable, or :class:`~jobboard.worker.retry.Fail`."""
    lost: int = 0
    """The claim was lost while the job ran or as it was settled (another worker may run it)."""
    cancelled: int = 0
    """Cancelled from outside (``board.cancel`` / ``jobboard cancel``) while it ran."""
    abandoned_on_shutdown: int = 0
    unsettled: int = 0
    """Settling failed for good (the board's close releases the claim: the job comes back)."""
    backend_errors: int = 0
    """Transient backend failures met (and ridden out) on the way."""
    claim_races: int = 0
    """Claims that found nothing right after the board offered work: another claimer was faster."""
    released: int = 0
    """Jobs claimed ahead (``prefetch``) and given back unstarted at the stop (not in ``claimed``)."""
    dropped: int = 0
    """Jobs claimed ahead and not started: found cancelled or lost meanwhile (not in ``claimed``)."""

    @property
    def abandoned(self) -> int:
        """Put back on the board: retried, plus abandoned on shutdown."""
        return self.retried + self.abandoned_on_shutdown

    @property
    def trashed(self) -> int:
        return self.failed

    def count(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)

    def settled(self) -> int:
        """Jobs that reached an outcome (equals ``claimed`` once the worker stopped)."""
        return sum(getattr(self, name) for name in OUTCOMES)

    def summary(self) -> str:
        """One readable line, e.g. ``12 jobs: 10 consumed, 1 retried, 1 failed; 3 backend errors``."""
        parts = [f"{getattr(self, name)} {name.replace('_', ' ')}" for name in OUTCOMES
                 if getattr(self, name) or name == "consumed"]
        text = f"{self.claimed} job{'s' if self.claimed != 1 else ''}: {', '.join(parts)}"
        return text + (f"; {self.backend_errors} backend errors ridden out" if self.backend_errors else "")

    def as_dict(self) -> dict[str, int]:
        return {item.name: getattr(self, item.name) for item in fields(self)}
