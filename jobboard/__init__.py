"""jobboard: hand units of work between processes without losing any.

Open a board by URL (``memory://name``, ``zookeeper://h1:2181,h2:2181/path``)
and use the :class:`JobBoard` contract.
"""

from __future__ import annotations

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
from jobboard.job import Claim, Entity, Job, JobState, Outcome, Priority, TrashedJob
from jobboard.registry import installed_schemes, open_board

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
