"""Where a board keeps things in ZooKeeper, and the small records it stores.

::

    <root>/counters/c-<epoch>   a counter: its data version is the job sequence
    <root>/jobs/<id>            claimable or claimed jobs; data = posting
    <root>/jobs/<id>/<dep-id>   a link: job <dep-id> waits for this one
    <root>/waiting/<id>         linked jobs whose dependencies are not all consumed
    <root>/locks/<id>           ephemeral: the claim (owner, nonce)
    <root>/trash/<id>           the posting, the reason and the time
    <root>/results/<id>         consume results of jobs posted with keep_result
    <root>/entities/<name>      ephemeral: live workers and their metadata
    <root>/marks/<board>-<n>    write markers: one per post or settle until its outcome is
                                known (see :mod:`jobboard_zookeeper.markers`)
    <root>/keys/<key>           idempotency keys: the job posted with the key (see
                                :mod:`jobboard_zookeeper.keys`)
    <root>/flow/state           limits and pauses; <root>/flow/p-<group>/<id>: ephemeral
                                permits; <root>/flow/r-<group>: a rate's window (see
                                :mod:`jobboard_zookeeper.flow`)

A job id is ``<rank>-<sequence>``, so a plain sort of ``jobs/`` is priority,
then posting order; ids are allocated before the write, so every write names
its nodes in advance and a replayed write is recognisable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jobboard.board.codec import MalformedEntry, decode_value, encode_value, progress_from, progress_record
from jobboard.job import Priority, Progress

DIRECTORIES = ("counters", "jobs", "waiting", "locks", "trash", "results", "entities", "marks", "keys", "flow")
EPOCH_SIZE = 2_000_000_000
"""A counter node's version is a 32-bit int: move to the next counter well before it overflows."""


def job_id(priority: Priority, sequence: int) -> str:
    return f"{priority.rank}-{sequence:013d}"


def sequence_of(job_id: str) -> int:
    """The posting sequence in a job id (``ValueError`` if it is not one)."""
    rank, _, sequence = job_id.partition("-")
    if not (rank.isdigit() and sequence.isdigit()):
        raise ValueError(f"not a job id: {job_id!r}")
    return int(sequence)


def is_job_id(name: str) -> bool:
    try:
        sequence_of(name)
    except ValueError:
        return False
    return True


def decode_record(data: bytes, what: str, field: str | None = None, kind: type = object) -> dict[str, Any]:
    """The map a stored record (``what``: lock, trash or key record) encodes, ``field`` holding a ``kind``
    if given. :raises MalformedEntry: ``data`` is not such a map."""
    record = decode_value(data)
    if not isinstance(record, dict) or field is not None and not isinstance(record.get(field), kind):
        raise MalformedEntry(f"{what} is not a map" + (f" with a {kind.__name__} {field!r}" if field else ""))
    return record


class Paths:
    """Absolute paths under one board root (the flat layout; see :mod:`.partitions` for the other)."""

    partitions = 0
    """How many partitions ``jobs/``, ``waiting/`` and ``locks/`` are split into (0: none)."""

    def __init__(self, root: str) -> None:
        self.root = "/" + root.strip("/")

    def listed_dirs(self, name: str) -> list[str]:
        """The directories whose children are the entries of ``name`` (``jobs``, ``trash`` ...)."""
        return [self.dir(name)]

    def dir(self, name: str) -> str:
        return f"{self.root}/{name}"

    def counter(self, epoch: int) -> str:
        return f"{self.root}/counters/c-{epoch:04d}"

    def node(self, name: str, job_id: str) -> str:
        """A job's node in directory ``name``: the one thing a partitioned layout changes (:mod:`.partitions`)."""
        return f"{self.root}/{name}/{job_id}"

    def job(self, job_id: str) -> str:
        return self.node("jobs", job_id)

    def waiting(self, job_id: str) -> str:
        return self.node("waiting", job_id)

    def lock(self, job_id: str) -> str:
        return self.node("locks", job_id)

    def trash(self, job_id: str) -> str:
        return self.node("trash", job_id)

    def result(self, job_id: str) -> str:
        return self.node("results", job_id)

    def entity(self, name: str) -> str:
        return f"{self.root}/entities/{name}"

    def mark(self, name: str) -> str:
        return f"{self.root}/marks/{name}"

    def flow(self, name: str) -> str:
        """A flow-control node (``state``, ``p-<group>``, ``r-<group>``: :mod:`jobboard_zookeeper.flow`)."""
        return f"{self.root}/flow/{name}"

    def permits(self, group: str) -> str:
        """The parent of a group's permits (its data version counts the permits granted)."""
        return self.flow(f"p-{quote(group, safe='')}")

    def permit(self, group: str, job_id: str) -> str:
        """The ephemeral permit of the claim of ``job_id`` (one at most: one live claim per job)."""
        return f"{self.permits(group)}/{job_id}"

    def rate(self, group: str) -> str:
        """A rated group's window: earlier grant times as data, the latest grant as its mtime."""
        return self.flow(f"r-{quote(group, safe='')}")

    def key(self, key: str) -> str:
        """The node of an idempotency key (quoted: any string is a valid key)."""
        return f"{self.root}/keys/k-{quote(key, safe='')}"


@dataclass(frozen=True, slots=True)
class LockRecord:
    """What a claim's ephemeral node holds."""

    owner: str
    nonce: str
    claimed_at: float

    def encode(self) -> bytes:
        return encode_value({"owner": self.owner, "nonce": self.nonce, "at": self.claimed_at}, what="lock")

    @classmethod
    def decode(cls, data: bytes) -> LockRecord:
        record = decode_record(data, "lock record")
        return cls(str(record.get("owner")), str(record.get("nonce")), float(record.get("at", 0.0)))


def lock_with_progress(data: bytes, progress: Progress) -> tuple[object, bytes] | None:
    """The lock node ``data`` with ``progress`` kept beside its :class:`LockRecord`, and the lock's owner as
    stored; ``None`` if ``data`` is not a map. :raises MalformedEntry: ``data`` is not msgpack."""
    record = decode_value(data)
    if not isinstance(record, dict):
        return None
    record["progress"] = progress_record(progress)
    return record.get("owner"), encode_value(record, what="lock")


def lock_progress(data: bytes) -> Progress | None:
    """The progress a claim reported, kept in its lock node beside the :class:`LockRecord` (``None``: none
    reported, or unreadable: progress is advisory)."""
    try:
        record = decode_value(data)
    except MalformedEntry:
        return None
    return progress_from(record.get("progress")) if isinstance(record, dict) else None


@dataclass(frozen=True, slots=True)
class TrashRecord:
    """A trashed job: its posting bytes, the reason and when."""

    posting: bytes
    reason: str
    trashed_at: float

    def encode(self) -> bytes:
        record: dict[str, Any] = {"posting": self.posting, "reason": self.reason, "at": self.trashed_at}
        return encode_value(record, what="trash record")

    @classmethod
    def decode(cls, data: bytes) -> TrashRecord:
        record = decode_record(data, "trash record", "posting", bytes)
        return cls(record["posting"], str(record.get("reason", "")), float(record.get("at", 0.0)))

    @classmethod
    def now(cls, posting: bytes, reason: str) -> TrashRecord:
        return cls(posting, reason, time.time())
