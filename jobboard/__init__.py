"""jobboard: hand units of work between processes without losing any.

Open a board by URL (``memory://name``, ``zookeeper://h1:2181,h2:2181/path``,
``redis://host:6379/0/name``) and use the :class:`JobBoard` contract.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing itself costs 20 ms to import; mypy takes this name as True
if TYPE_CHECKING:
    from typing import Any

    from jobboard.board import JobBoard, JobRef, NewJob
    from jobboard.dag import InvalidPlan, Plan, Task, TaskRef, to_dot, to_mermaid
    from jobboard.early_signals import catch_early_signals
    from jobboard.errors import (
        AlreadyClaimed,
        BackendNotFound,
        BackendUnavailable,
        BoardClosed,
        BoardConflict,
        ClaimLost,
        DependencyMissing,
        InvalidJob,
        InvalidURL,
        JobBoardError,
        JobNotFound,
        NotClaimable,
        NotOwner,
        UnknownOutcome,
    )
    from jobboard.events import Event, EventKind, EventStream
    from jobboard.handlers import Handler, Handlers, Hook, JobContext, Middleware
    from jobboard.job import (
        Claim,
        Entity,
        Job,
        JobState,
        LastError,
        ListedJob,
        Outcome,
        Priority,
        TrashedJob,
    )
    from jobboard.live import LiveBoard
    from jobboard.plans import (
        PlanHandle,
        PlanOutcome,
        PlanProgress,
        PlanStatus,
        cleanup_interrupted_plans,
        post_plan,
    )
    from jobboard.registry import installed_schemes, open_board
    from jobboard.retry import Fail, Retry, RetryPolicy
    from jobboard.stats import BoardStats, WorkerView, read_stats
    from jobboard.worker import Worker
    from jobboard.worker_config import WorkerConfig, default_owner
    from jobboard.worker_support import WorkerStats

_WHERE = {
    "AlreadyClaimed": "jobboard.errors",
    "BackendNotFound": "jobboard.errors",
    "BackendUnavailable": "jobboard.errors",
    "BoardClosed": "jobboard.errors",
    "BoardConflict": "jobboard.errors",
    "BoardStats": "jobboard.stats",
    "catch_early_signals": "jobboard.early_signals",
    "Claim": "jobboard.job",
    "ClaimLost": "jobboard.errors",
    "cleanup_interrupted_plans": "jobboard.plans",
    "default_owner": "jobboard.worker_config",
    "Entity": "jobboard.job",
    "Event": "jobboard.events",
    "EventKind": "jobboard.events",
    "EventStream": "jobboard.events",
    "Fail": "jobboard.retry",
    "Handler": "jobboard.handlers",
    "Handlers": "jobboard.handlers",
    "Hook": "jobboard.handlers",
    "installed_schemes": "jobboard.registry",
    "DependencyMissing": "jobboard.errors",
    "InvalidJob": "jobboard.errors",
    "InvalidPlan": "jobboard.dag",
    "InvalidURL": "jobboard.errors",
    "Job": "jobboard.job",
    "JobBoard": "jobboard.board",
    "JobBoardError": "jobboard.errors",
    "JobContext": "jobboard.handlers",
    "JobNotFound": "jobboard.errors",
    "JobRef": "jobboard.board",
    "JobState": "jobboard.job",
    "LastError": "jobboard.job",
    "ListedJob": "jobboard.job",
    "LiveBoard": "jobboard.live",
    "Middleware": "jobboard.handlers",
    "NewJob": "jobboard.board",
    "NotClaimable": "jobboard.errors",
    "NotOwner": "jobboard.errors",
    "open_board": "jobboard.registry",
    "Outcome": "jobboard.job",
    "Plan": "jobboard.dag",
    "PlanHandle": "jobboard.plans",
    "PlanOutcome": "jobboard.plans",
    "PlanProgress": "jobboard.plans",
    "PlanStatus": "jobboard.plans",
    "post_plan": "jobboard.plans",
    "Priority": "jobboard.job",
    "read_stats": "jobboard.stats",
    "Retry": "jobboard.retry",
    "RetryPolicy": "jobboard.retry",
    "Task": "jobboard.dag",
    "TaskRef": "jobboard.dag",
    "to_dot": "jobboard.dag",
    "to_mermaid": "jobboard.dag",
    "TrashedJob": "jobboard.job",
    "UnknownOutcome": "jobboard.errors",
    "Worker": "jobboard.worker",
    "WorkerConfig": "jobboard.worker_config",
    "WorkerStats": "jobboard.worker_support",
    "WorkerView": "jobboard.stats",
}
"""Where each public name lives: imported on first use, so that ``import jobboard`` is cheap
(a worker process installs its signal handlers before the heavy imports)."""


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'jobboard' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "AlreadyClaimed",
    "BackendNotFound",
    "BackendUnavailable",
    "BoardClosed",
    "BoardConflict",
    "BoardStats",
    "Claim",
    "ClaimLost",
    "DependencyMissing",
    "Entity",
    "Event",
    "EventKind",
    "EventStream",
    "Fail",
    "Handler",
    "Handlers",
    "Hook",
    "InvalidJob",
    "InvalidPlan",
    "InvalidURL",
    "Job",
    "JobBoard",
    "JobBoardError",
    "JobContext",
    "JobNotFound",
    "JobRef",
    "JobState",
    "LastError",
    "ListedJob",
    "LiveBoard",
    "Middleware",
    "NewJob",
    "NotClaimable",
    "NotOwner",
    "Outcome",
    "Plan",
    "PlanHandle",
    "PlanOutcome",
    "PlanProgress",
    "PlanStatus",
    "Priority",
    "Retry",
    "RetryPolicy",
    "Task",
    "TaskRef",
    "TrashedJob",
    "UnknownOutcome",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "WorkerView",
    "catch_early_signals",
    "cleanup_interrupted_plans",
    "default_owner",
    "installed_schemes",
    "open_board",
    "post_plan",
    "read_stats",
    "to_dot",
    "to_mermaid",
]
