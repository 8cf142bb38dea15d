"""Periodic jobs: a :class:`Schedule` and when it is due (:mod:`.schedule`, no I/O), and the
:class:`Scheduler` that posts them (:mod:`.scheduler`).

Names are imported on first use (``import jobboard.schedules`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.schedules.schedule import Schedule
    from jobboard.schedules.scheduler import Scheduler

__all__ = ["Schedule", "Scheduler"]

__getattr__ = lazy_exports(__name__, {"Schedule": "schedule", "Scheduler": "scheduler"})
