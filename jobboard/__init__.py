"""jobboard: hand units of work between processes without losing any.

Open a board by URL (``memory://name``, ``zookeeper://h1:2181,h2:2181/path``,
``redis://host:6379/0/name``) and use the :class:`JobBoard` contract.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing itself costs 20 ms to import; mypy takes this name as True
if TYPE_CHECKING:
    from typing import Any

    from jobboard.board.contract import JobBoard, JobRef, NewJob
    from jobboard.board.events import Event, EventKind, EventStream
    from jobboard.board.registry import installed_schemes, open_board
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
    from jobboard.observe.live import LiveBoard
    from jobboard.observe.stats import BoardStats, WorkerView, read_stats
    from jobboard.plans.dag import InvalidPlan, Plan, Task, TaskRef, to_dot, to_mermaid
    from jobboard.plans.posting import (
        PlanHandle,
        PlanOutcome,
        PlanProgress,
        PlanStatus,
        cleanup_interrupted_plans,
        post_plan,
    )
    from jobboard.worker.conductor import Worker
    from jobboard.worker.config import WorkerConfig, default_owner
    from jobboard.worker.early_signals import catch_early_signals
    from jobboard.worker.handlers import Handler, Handlers, Hook, JobContext, Middleware
    from jobboard.worker.retry import Fail, Retry, RetryPolicy
    from jobboard.worker.running import WorkerStats

_WHERE = {
    "AlreadyClaimed": "jobboard.errors",
    "BackendNotFound": "jobboard.errors",
    "BackendUnavailable": "jobboard.errors",
    "BoardClosed": "jobboard.errors",
    "BoardConflict": "jobboard.errors",
    "BoardStats": "jobboard.observe.stats",
    "catch_early_signals": "jobboard.worker.early_signals",
    "Claim": "jobboard.job",
    "ClaimLost": "jobboard.errors",
    "cleanup_interrupted_plans": "jobboard.plans.posting",
    "default_owner": "jobboard.worker.config",
    "Entity": "jobboard.job",
    "Event": "jobboard.board.events",
    "EventKind": "jobboard.board.events",
    "EventStream": "jobboard.board.events",
    "Fail": "jobboard.worker.retry",
    "Handler": "jobboard.worker.handlers",
    "Handlers": "jobboard.worker.handlers",
    "Hook": "jobboard.worker.handlers",
    "installed_schemes": "jobboard.board.registry",
    "DependencyMissing": "jobboard.errors",
    "InvalidJob": "jobboard.errors",
    "InvalidPlan": "jobboard.plans.dag",
    "InvalidURL": "jobboard.errors",
    "Job": "jobboard.job",
    "JobBoard": "jobboard.board.contract",
    "JobBoardError": "jobboard.errors",
    "JobContext": "jobboard.worker.handlers",
    "JobNotFound": "jobboard.errors",
    "JobRef": "jobboard.board.contract",
    "JobState": "jobboard.job",
    "LastError": "jobboard.job",
    "ListedJob": "jobboard.job",
    "LiveBoard": "jobboard.observe.live",
    "Middleware": "jobboard.worker.handlers",
    "NewJob": "jobboard.board.contract",
    "NotClaimable": "jobboard.errors",
    "NotOwner": "jobboard.errors",
    "open_board": "jobboard.board.registry",
    "Outcome": "jobboard.job",
    "Plan": "jobboard.plans.dag",
    "PlanHandle": "jobboard.plans.posting",
    "PlanOutcome": "jobboard.plans.posting",
    "PlanProgress": "jobboard.plans.posting",
    "PlanStatus": "jobboard.plans.posting",
    "post_plan": "jobboard.plans.posting",
    "Priority": "jobboard.job",
    "read_stats": "jobboard.observe.stats",
    "Retry": "jobboard.worker.retry",
    "RetryPolicy": "jobboard.worker.retry",
    "Task": "jobboard.plans.dag",
    "TaskRef": "jobboard.plans.dag",
    "to_dot": "jobboard.plans.dag",
    "to_mermaid": "jobboard.plans.dag",
    "TrashedJob": "jobboard.job",
    "UnknownOutcome": "jobboard.errors",
    "Worker": "jobboard.worker.conductor",
    "WorkerConfig": "jobboard.worker.config",
    "WorkerStats": "jobboard.worker.running",
    "WorkerView": "jobboard.observe.stats",
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
