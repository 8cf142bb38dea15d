"""Idempotency keys on ZooKeeper: ``keys/k-<quoted key>``, created in the post's own multi.

While the job is on the board the node holds ``{"job": id}``. The settle that
removes the job (consume, trash, cancel, or a trash cascade) rewrites it in the
same multi to ``{"job": id, "settled": <posting>}`` (consumed) or ``{"job": id,
"trashed": true}`` (the posting is in ``trash/<id>``); that write sets the node's
mtime, from which the retention window counts (by the server's clock, read from
the reply to a write just before). A post that finds an expired settled key
takes it over in its own multi (``set_data`` at the version read, so a version
never repeats and the collector's delete at an old version fails), so expiry is
exact whenever collection runs; collection only frees the space.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobboard.board.codec import MalformedEntry, encode_value
from jobboard_zookeeper.layout import Paths, decode_record
from jobboard_zookeeper.ops import Delete, SetData, Stat
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What a key node holds: the job; once consumed its posting, once trashed a mark
    (the posting is then in ``trash/<id>``: a keyed job's posting is never written twice)."""

    job_id: str
    settled: bytes | None = None
    trashed: bool = False

    @property
    def is_settled(self) -> bool:
        return self.settled is not None or self.trashed

    def encode(self) -> bytes:
        record: dict[str, object] = {"job": self.job_id}
        if self.settled is not None:
            record["settled"] = self.settled
        if self.trashed:
            record["trashed"] = True
        return encode_value(record, what="key record")

    @classmethod
    def decode(cls, data: bytes) -> KeyRecord:
        record = decode_record(data, "key record", "job", str)
        settled = record.get("settled")
        return cls(record["job"], settled if isinstance(settled, bytes) else None, record.get("trashed") is True)


def expired(stat: Stat, record: KeyRecord, retention: float, server_now: float) -> bool:
    """Whether a settled key is past its retention (both times by the server's clock)."""
    return record.is_settled and server_now - stat.mtime >= retention


def key_settled(paths: Paths, job_id: str, key: str, raw: bytes, *, trashed: bool) -> SetData:
    """What a settle that removes a keyed job adds to its multi: its key node rewritten (consumed:
    the posting ``raw``; trashed: a mark). A settle of an unkeyed job has no key to write."""
    record = KeyRecord(job_id, trashed=True) if trashed else KeyRecord(job_id, raw)
    return SetData(paths.key(key), record.encode(), -1)


async def collect_keys(zk: ZooKeeper, paths: Paths, retention: float, server_now: float) -> int:
    """Delete the keys of jobs settled more than ``retention`` ago; returns how many.

    Deletes at the version read: a key taken over meanwhile (``set_data`` by a post)
    has a higher version and is kept.
    """
    listing = await zk.children(paths.dir("keys"))
    removed = 0
    for name in listing[0] if listing else []:
        path = f"{paths.dir('keys')}/{name}"
        found = await zk.get(path)
        if found is None:
            continue
        try:
            record = KeyRecord.decode(found[0])
        except MalformedEntry:
            logger.warning("malformed key record %s is left alone", path)
            continue
        if expired(found[1], record, retention, server_now):
            result = await zk.multi([Delete(path, found[1].version)], retry_safe=True)
            removed += result.ok
    return removed
