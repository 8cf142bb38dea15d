"""jobboard: hand units of work between processes without losing any.

Open a board by URL (``memory://name``, ``zookeeper://h1:2181,h2:2181/path``)
and use the :class:`JobBoard` contract.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing itself costs 20 ms to import; mypy takes this name as True
if TYPE_CHECKING:
    from typing import Any

    from jobboard.board import JobBoard, JobRef, NewJob
    from jobboard.errors import (
        AlreadyClaimed,
        BackendNotFound,
        BackendUnavailable,
        BoardClosed,
        BoardConflict,
        ClaimLost,
        InvalidJob,
        InvalidURL,
        JobBoardError,
        JobNotFound,
        NotClaimable,
        NotOwner,
        UnknownOutcome,
    )
    from jobboard.events import Event, EventKind, EventStream
    from jobboard.job import Claim, Entity, Job, JobState, ListedJob, Outcome, Priority, TrashedJob
    from jobboard.registry import installed_schemes, open_board

_WHERE = {
    "AlreadyClaimed": "jobboard.errors",
    "BackendNotFound": "jobboard.errors",
    "BackendUnavailable": "jobboard.errors",
    "BoardClosed": "jobboard.errors",
    "BoardConflict": "jobboard.errors",
    "Claim": "jobboard.job",
    "ClaimLost": "jobboard.errors",
    "Entity": "jobboard.job",
    "Event": "jobboard.events",
    "EventKind": "jobboard.events",
    "EventStream": "jobboard.events",
    "InvalidJob": "jobboard.errors",
    "InvalidURL": "jobboard.errors",
    "Job": "jobboard.job",
    "JobBoard": "jobboard.board",
    "JobBoardError": "jobboard.errors",
    "JobNotFound": "jobboard.errors",
    "JobRef": "jobboard.board",
    "JobState": "jobboard.job",
    "NewJob": "jobboard.board",
    "NotClaimable": "jobboard.errors",
    "NotOwner": "jobboard.errors",
    "Outcome": "jobboard.job",
    "Priority": "jobboard.job",
    "TrashedJob": "jobboard.job",
    "ListedJob": "jobboard.job",
    "UnknownOutcome": "jobboard.errors",
    "installed_schemes": "jobboard.registry",
    "open_board": "jobboard.registry",
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
    "Claim",
    "ClaimLost",
    "Entity",
    "Event",
    "EventKind",
    "EventStream",
    "InvalidJob",
    "InvalidURL",
    "Job",
    "JobBoard",
    "JobBoardError",
    "JobNotFound",
    "JobRef",
    "JobState",
    "ListedJob",
    "NewJob",
    "NotClaimable",
    "NotOwner",
    "Outcome",
    "Priority",
    "TrashedJob",
    "UnknownOutcome",
    "installed_schemes",
    "open_board",
]
