"""jobboard: hand units of work between processes without losing any.

Open a board by URL (``memory://name``, ``zookeeper://h1:2181,h2:2181/path``,
``redis://host:6379/0/name``) and use the :class:`JobBoard` contract.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing itself costs 20 ms to import; mypy takes this name as True
if TYPE_CHECKING:
    from typing import Any

    from jobboard.board import (
        Event,
        EventKind,
        EventStream,
        GroupLimit,
        JobBoard,
        JobRef,
        NewJob,
        Paused,
        Rate,
        installed_schemes,
        open_board,
    )
    from jobboard.errors import (
        AlreadyClaimed,
        BackendNotFound,
        BackendUnavailable,
        BoardClosed,
        BoardConflict,
        ClaimLost,
        DependencyMissing,
        HeldBack,
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
    from jobboard.observe import BoardStats, LiveBoard, WorkerView, read_stats
    from jobboard.plans import (
        InvalidPlan,
        Plan,
        PlanHandle,
        PlanOutcome,
        PlanProgress,
        PlanStatus,
        Task,
        TaskRef,
        cleanup_interrupted_plans,
        post_plan,
        to_dot,
        to_mermaid,
    )
    from jobboard.worker import (
        Fail,
        Handler,
        Handlers,
        Hook,
        JobContext,
        Middleware,
        Retry,
        RetryPolicy,
        Worker,
        WorkerConfig,
        WorkerStats,
        catch_early_signals,
        default_owner,
    )

_WHERE = {
    **dict.fromkeys((
        "Event", "EventKind", "EventStream", "GroupLimit", "JobBoard", "JobRef", "NewJob", "Paused", "Rate",
        "installed_schemes", "open_board",
    ), "jobboard.board"),
    **dict.fromkeys((
        "AlreadyClaimed", "BackendNotFound", "BackendUnavailable", "BoardClosed", "BoardConflict", "ClaimLost",
        "DependencyMissing", "HeldBack", "InvalidJob", "InvalidURL", "JobBoardError", "JobNotFound", "NotClaimable",
        "NotOwner", "UnknownOutcome",
    ), "jobboard.errors"),
    **dict.fromkeys((
        "Claim", "Entity", "Job", "JobState", "LastError", "ListedJob", "Outcome", "Priority", "TrashedJob",
    ), "jobboard.job"),
    **dict.fromkeys((
        "BoardStats", "LiveBoard", "WorkerView", "read_stats",
    ), "jobboard.observe"),
    **dict.fromkeys((
        "InvalidPlan", "Plan", "PlanHandle", "PlanOutcome", "PlanProgress", "PlanStatus", "Task", "TaskRef",
        "cleanup_interrupted_plans", "post_plan", "to_dot", "to_mermaid",
    ), "jobboard.plans"),
    **dict.fromkeys((
        "Fail", "Handler", "Handlers", "Hook", "JobContext", "Middleware", "Retry", "RetryPolicy", "Worker",
        "WorkerConfig", "WorkerStats", "catch_early_signals", "default_owner",
    ), "jobboard.worker"),
}
"""Where each public name comes from: the module that defines it, or the subpackage that exports it (each
subpackage says which of its modules). Imported on first use, so that ``import jobboard`` is cheap (a worker
process installs its signal handlers before the heavy imports)."""


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
    "GroupLimit",
    "Handler",
    "Handlers",
    "HeldBack",
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
    "Paused",
    "Plan",
    "PlanHandle",
    "PlanOutcome",
    "PlanProgress",
    "PlanStatus",
    "Priority",
    "Rate",
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
