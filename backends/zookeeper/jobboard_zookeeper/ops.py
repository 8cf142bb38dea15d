"""The ZooKeeper operations, results and events the backend works with (no aiozk here)."""

from __future__ import annotations

from dataclasses import dataclass

from jobboard.errors import BackendUnavailable, JobBoardError


class OutcomeUnknown(BackendUnavailable):
    """The connection broke after a write was sent: it may or may not have been applied."""


class ZkError(JobBoardError):
    """A ZooKeeper error reply to a single (non-multi) request; ``code`` names it."""

    def __init__(self, code: str, path: str) -> None:
        super().__init__(f"ZooKeeper {code} on {path}")
        self.code = code


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int


@dataclass(frozen=True, slots=True)
class Check:
    path: str
    version: int


Op = Create | Delete | SetData | Check


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    czxid: int
    mzxid: int
    num_children: int
    ephemeral_owner: int
    mtime: float = 0.0
    """When the node was last written, by the server's clock (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Per-operation outcome of a multi: ``errors[i]`` is ``None`` or an error name."""

    ops: tuple[Op, ...]
    errors: tuple[str | None, ...]
    versions: tuple[int | None, ...]
    """New data version for each successful ``SetData``."""
    zxid: int
    ok: bool
    """Every operation applied (``errors`` all ``None``): told once, by the session that decoded the reply."""
    mtimes: tuple[float | None, ...] = ()
    """For each successful ``SetData``: the node's new mtime (the server's clock at the write, seconds)."""

    def failure(self) -> tuple[Op, str] | None:
        """The operation that made the multi fail, with its error name."""
        for op, error in zip(self.ops, self.errors, strict=True):
            if error not in (None, "RolledBack", "RuntimeInconsistency"):
                return op, error
        return None


class SessionEvent:
    CONNECTED = "connected"
    """First connection, or a new session after an expiry."""
    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    """Back on the same session: ephemerals and watches survived."""
    EXPIRED = "expired"
    """The session is gone, and every ephemeral node it owned with it."""
