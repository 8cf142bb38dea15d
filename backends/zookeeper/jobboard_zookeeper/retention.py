"""Retention on ZooKeeper: kept results and trash entries expire, collected by the boards themselves.

One board collects at a time: the holder of the ephemeral ``<root>/collector`` node
(see :mod:`jobboard_zookeeper.collect`). A pass lists ``results/`` and ``trash/``,
reads each node once (its ``mtime`` is when it was written, by the server's clock: the
nodes are never modified), remembers it, and deletes those whose time to live has
passed by the server's clock now (read from the reply to a write, as for keys), in
batches of :data:`DELETE_BATCH`. A trashed job's key goes with its trash entry.

A job's own ``result_ttl`` travels in its result node: the data is then
``0xc1`` (a byte msgpack never uses) + the TTL (8-byte float) + the result.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from dataclasses import dataclass

from jobboard.board.codec import MalformedEntry, decode_posting
from jobboard.errors import JobBoardError
from jobboard_zookeeper.collect import is_collector
from jobboard_zookeeper.keys import KeyRecord
from jobboard_zookeeper.layout import Paths, TrashRecord, is_job_id
from jobboard_zookeeper.ops import Delete, Op, OutcomeUnknown
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

DELETE_BATCH = 128
TTL_PREFIX = b"\xc1"
_TTL = struct.Struct(">d")


def pack_result(raw: bytes, ttl: float | None) -> bytes:
    """A result node's data: the encoded result, prefixed by the job's own TTL if it has one."""
    return raw if ttl is None else TTL_PREFIX + _TTL.pack(ttl) + raw


def unpack_result(data: bytes) -> tuple[bytes, float | None]:
    """The encoded result and the job's own TTL (``None``: the board's)."""
    if data[:1] != TTL_PREFIX:
        return data, None
    return data[1 + _TTL.size:], _TTL.unpack_from(data, 1)[0]


def retention_interval(result_ttl: float, trash_ttl: float) -> float:
    """Seconds between passes: a quarter of the shorter TTL, from 0.2 s to a minute."""
    ttls = [ttl for ttl in (result_ttl, trash_ttl) if ttl > 0]
    return min(60.0, max(0.2, min(ttls) / 4)) if ttls else 60.0


@dataclass(frozen=True, slots=True)
class Seen:
    """A result or trash node as first read: when it was written, its own TTL, its creation, its key."""

    written: float
    ttl: float | None
    czxid: int
    key: str | None = None


class Retainer:
    """The collector's memory of ``results/`` and ``trash/`` and its passes."""

    def __init__(self, zk: ZooKeeper, paths: Paths, result_ttl: float, trash_ttl: float) -> None:
        self._zk, self._paths = zk, paths
        self._ttls = {"results": result_ttl, "trash": trash_ttl}
        self._seen: dict[str, dict[str, Seen]] = {"results": {}, "trash": {}}

    async def collect(self, server_now: float) -> int:
        """One pass; returns how many nodes it deleted."""
        removed = 0
        for kind in ("results", "trash"):
            listing = await self._zk.children(self._paths.dir(kind))
            names = {name for name in (listing[0] if listing else []) if is_job_id(name)}
            seen = self._seen[kind]
            for gone in seen.keys() - names:
                del seen[gone]
            for name in sorted(names - seen.keys()):
                found = await self._read(kind, name)
                if found is not None:
                    seen[name] = found
            board_ttl = self._ttls[kind]
            due = sorted(name for name, item in seen.items()
                         if _expired(item, board_ttl, server_now))
            for start in range(0, len(due), DELETE_BATCH):
                removed += await self._delete(kind, due[start:start + DELETE_BATCH])
        return removed

    async def _read(self, kind: str, name: str) -> Seen | None:
        found = await self._zk.get(f"{self._paths.dir(kind)}/{name}")
        if found is None:
            return None
        data, stat = found
        if kind == "results":
            return Seen(stat.mtime, unpack_result(data)[1], stat.czxid)
        try:
            posting = decode_posting(TrashRecord.decode(data).posting)
        except MalformedEntry:
            return Seen(stat.mtime, None, stat.czxid)  # expires by the board's trash_ttl
        return Seen(stat.mtime, posting.trash_ttl, stat.czxid, posting.key)

    async def _delete(self, kind: str, names: list[str]) -> int:
        """Delete expired nodes (with their keys) in one multi, else one by one; re-checked first:
        a node written again since it was read (a job requeued and trashed again) is read again."""
        ops: list[Op] = []
        for name in names:
            ops += await self._ops(kind, name)
        if not ops:
            return 0
        try:
            if (await self._zk.multi(ops)).ok:
                for name in names:
                    self._seen[kind].pop(name, None)
                return len(names)
        except OutcomeUnknown:
            pass
        removed = 0
        for name in names:
            item_ops = await self._ops(kind, name)
            if item_ops and (await self._zk.multi(item_ops, retry_safe=True)).ok:
                removed += 1
            self._seen[kind].pop(name, None)
        return removed

    async def _ops(self, kind: str, name: str) -> list[Op]:
        """The deletes of one expired node (and of its key), or none if it changed since it was read."""
        path = f"{self._paths.dir(kind)}/{name}"
        stat = await self._zk.exists(path)
        seen = self._seen[kind].get(name)
        if stat is None or seen is None or stat.czxid != seen.czxid:
            self._seen[kind].pop(name, None)  # gone, or a new node: read again next pass
            return []
        return [Delete(path, stat.version), *await key_deletes(self._zk, self._paths, name, seen.key)]


async def key_deletes(zk: ZooKeeper, paths: Paths, job_id: str, key: str | None) -> list[Op]:
    """The delete of a trashed job's key node, if it still finds that job (a purge frees the key)."""
    if key is None:
        return []
    found = await zk.get(paths.key(key))
    if found is None:
        return []
    try:
        record = KeyRecord.decode(found[0])
    except MalformedEntry:
        return []
    return [Delete(paths.key(key), found[1].version)] if record.job_id == job_id and record.trashed else []


def _expired(item: Seen, board_ttl: float, server_now: float) -> bool:
    ttl = board_ttl if item.ttl is None else item.ttl
    return ttl > 0 and server_now - item.written >= ttl


async def retain_forever(zk: ZooKeeper, paths: Paths, result_ttl: float, trash_ttl: float) -> None:
    """Collect expired results and trash while this board is open and holds the collector node."""
    retainer = Retainer(zk, paths, result_ttl, trash_ttl)
    collector = f"{paths.root}/collector"
    interval = retention_interval(result_ttl, trash_ttl)
    while True:
        try:
            if await is_collector(zk, collector):
                removed = await retainer.collect((await zk.bump(collector)).mtime)
                if removed:
                    logger.info("collected %d expired results and trash entries", removed)
        except JobBoardError as error:
            logger.debug("retention pass skipped: %s", error)
        await asyncio.sleep(interval * random.uniform(0.9, 1.1))
