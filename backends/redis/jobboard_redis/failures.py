"""How a failed Redis call is judged: transient (retried over the window) or permanent (one line at
once), and whether an attempt that failed may have run (sent, then the connection failed)."""

from __future__ import annotations

from jobboard.errors import BackendUnavailable, InvalidURL, JobBoardError
from jobboard_redis.client_wire import ConnectionLost, NotSent, ServerError

__all__ = [
    "PERMANENT_CODES",
    "RECONNECT_CODES",
    "TRANSIENT_CODES",
    "RetryExhausted",
    "is_transient",
    "may_have_run",
    "permanent_error",
]

TRANSIENT_CODES = frozenset({"LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "UNBLOCKED", "MOVED",
                             "ASK"})
PERMANENT_CODES = frozenset({"NOPERM", "WRONGPASS", "NOAUTH"})
RECONNECT_CODES = frozenset({"MASTERDOWN", "READONLY", "UNBLOCKED", "MOVED", "CLUSTERDOWN"})
"""Replies of a server that is not (or no longer) the primary: ask the Sentinels (or the Cluster's nodes) again
(``UNBLOCKED``: a blocked read ended by the server's demotion; ``MOVED``: the board's slot has another master).
``ASK`` and ``TRYAGAIN`` (the board's slot being migrated) are waited out on the same connection: the board's
keys are all in one slot, and its scripts must not run while they are split between two nodes."""


class RetryExhausted(BackendUnavailable):
    """Redis could not be reached within the retry window. ``maybe_applied``: an attempt was sent
    and its reply lost, so a write may have applied; ``False``: none was ever sent (not applied)."""

    def __init__(self, message: str, *, maybe_applied: bool = True) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


def permanent_error(error: BaseException) -> JobBoardError:
    """A one-line error for a failure that retrying cannot fix (:class:`InvalidURL` when the URL's own
    database number or password is what the server refused)."""
    if isinstance(error, ServerError) and "DB index is out of range" in str(error):
        return InvalidURL(f"redis: the URL's database number is not on this server (its `databases` setting): {error}")
    if isinstance(error, ServerError) and error.code == "WRONGPASS":
        return InvalidURL(f"redis: the URL's user name or password was refused: {error}")
    if isinstance(error, ServerError) and error.code in PERMANENT_CODES:
        return JobBoardError(f"Redis refused the board's command (check the user's ACL and password): {error}")
    return JobBoardError(f"Redis error: {error}")


def may_have_run(error: ConnectionLost | ServerError) -> bool:
    """Whether a failed attempt may have run: sent, then the connection failed (a refusal did not run)."""
    return isinstance(error, ConnectionLost) and not isinstance(error, NotSent)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ServerError):
        return error.code in TRANSIENT_CODES
    return isinstance(error, ConnectionLost)
