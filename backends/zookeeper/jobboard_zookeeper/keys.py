"""Idempotency keys on ZooKeeper: ``keys/k-<quoted key>``, created in the post's own multi.

While the job is on the board the node holds ``{"job": id}``. The settle that
removes the job (consume, trash, cancel, or a trash cascade) rewrites it in the
same multi to ``{"job": id, "settled": <posting>}``; that write sets the node's
mtime, from which the retention window counts (by the server's clock). A post
that finds an expired settled key replaces it in its own multi (delete at the
read version), so expiry is exact whenever collection runs; collection only
frees the space.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from jobboard.codec import MalformedEntry, Posting, decode_posting, decode_value, encode_value
from jobboard.job import Job
from jobboard_zookeeper.layout import Paths, sequence_of
from jobboard_zookeeper.ops import Delete, Op, SetData, Stat
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What a key node holds: the job, and its posting once settled."""

    job_id: str
    settled: bytes | None = None

    def encode(self) -> bytes:
        record: dict[str, object] = {"job": self.job_id}
        if self.settled is not None:
            record["settled"] = self.settled
        return encode_value(record, what="key record")

    @classmethod
    def decode(cls, data: bytes) -> KeyRecord:
        record = decode_value(data)
        if not isinstance(record, dict) or not isinstance(record.get("job"), str):
            raise MalformedEntry("key record is not a map with a job id")
        settled = record.get("settled")
        return cls(record["job"], settled if isinstance(settled, bytes) else None)

    def settled_job(self) -> Job:
        """The job as it was when settled. :raises MalformedEntry: no valid posting."""
        return decode_posting(self.settled).to_job(self.job_id, sequence_of(self.job_id))


def expired(stat: Stat, record: KeyRecord, retention: float) -> bool:
    return record.settled is not None and time.time() - stat.mtime >= retention


def settle_ops(paths: Paths, job_id: str, posting: Posting, raw: bytes) -> list[Op]:
    """What a settle that removes a keyed job adds to its multi (nothing for unkeyed jobs)."""
    if posting.key is None:
        return []
    return [SetData(paths.key(posting.key), KeyRecord(job_id, raw).encode(), -1)]


async def collect_keys(zk: ZooKeeper, paths: Paths, retention: float) -> int:
    """Delete the keys of jobs settled more than ``retention`` ago; returns how many."""
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
        if expired(found[1], record, retention):
            result = await zk.multi([Delete(path, found[1].version)], retry_safe=True)
            removed += result.ok
    return removed
