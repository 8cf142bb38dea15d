"""The contract: :class:`JobBoard` (the façade every caller uses), its inputs and checks, the stored
formats, events, board URLs and the registry that opens a board by URL.

Names are imported on first use (``import jobboard.board`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.board.checks import check_owner
    from jobboard.board.contract import JobBoard
    from jobboard.board.events import Event, EventKind, EventStream
    from jobboard.board.inputs import JobRef, NewJob, job_id_of
    from jobboard.board.limits import GroupLimit, Paused, Rate
    from jobboard.board.registry import installed_schemes, open_board

__all__ = ["Event", "EventKind", "EventStream", "GroupLimit", "JobBoard", "JobRef", "NewJob", "Paused", "Rate", "check_owner", "installed_schemes", "job_id_of", "open_board"]

__getattr__ = lazy_exports(__name__, {"Event": "events", "EventKind": "events", "EventStream": "events", "GroupLimit": "limits", "JobBoard": "contract", "JobRef": "inputs", "NewJob": "inputs", "Paused": "limits", "Rate": "limits", "check_owner": "checks", "installed_schemes": "registry", "job_id_of": "inputs", "open_board": "registry"})
