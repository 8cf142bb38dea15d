"""What the board hands its backend: requests already checked, defaulted and encoded.

:class:`~jobboard.board.JobBoard` checks and encodes a caller's input once, for every backend,
then makes one call with one of these requests: a post is a :class:`Prepared` (to ``_post`` or
``_post_many``), and consume, abandon and trash are one :class:`Settle` with an action (to
``_settle``), as the worker and the distributed backends already think of them. A backend does the
I/O: it never sees a posting that was not checked, a result that msgpack cannot carry or that is over
the board's size limit, or a negative ``retry_after``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from jobboard.codec import Posting
from jobboard.job import LastError

__all__ = ["Prepared", "Settle", "SettleAction"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One post: the posting after the board's defaults (with its trace context), and its stored bytes
    (size-checked against the board's ``max_posting_bytes``)."""

    posting: Posting
    raw: bytes


class SettleAction(enum.Enum):
    """How a claim is settled."""

    CONSUME = "consume"
    """Done: the job is removed, its result delivered to its dependents (and kept if asked)."""
    ABANDON = "abandon"
    """Back on the board, claimable again after ``retry_after`` seconds."""
    TRASH = "trash"
    """To the trash with ``reason``, its dependents with it."""


@dataclass(slots=True)
class Settle:
    """One settle of a claim, checked and encoded by the board (read-only for a backend: not frozen only
    because a frozen dataclass costs 1.1 us to build against 0.6, a tenth of memory://'s whole settle).

    Atomic in every backend: the claim's generation and owner are checked in the same write that
    changes the job (:class:`~jobboard.errors.ClaimLost`, :class:`~jobboard.errors.NotOwner` otherwise,
    nothing changed).
    """

    action: SettleAction
    result: Any = None
    """``CONSUME``: the handler's result, as given."""
    encoded_result: bytes = b"\xc0"
    """``CONSUME``: ``result`` encoded (msgpack), within the board's size limit."""
    retry_after: float | None = None
    """``ABANDON``: seconds (finite, > 0) before the job is claimable again; ``None``: at once."""
    reason: str = ""
    """``TRASH``: why (kept with the trashed job)."""
    error: LastError | None = None
    """``ABANDON`` and ``TRASH``: why the attempt failed, stored as the job's ``last_error``."""
