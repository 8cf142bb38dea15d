"""Posting on ZooKeeper: ids allocated before the write, so every write is recognisable.

A job's sequence is the new data version of a counter node (one ``set_data``
with version -1: cheap, never contended, a replay only skips a number). Its
id names the nodes the post creates, all in one multi: ``jobs/<id>``, or for a
linked job ``waiting/<id>`` plus a link ``<dependency>/<id>`` under each
dependency (a dependency that is gone makes the whole multi fail). A lost reply
is resolved by reading the node back and comparing the posting's token.
"""

from __future__ import annotations

import asyncio

from jobboard.codec import MalformedEntry, Posting, decode_posting
from jobboard.errors import InvalidJob
from jobboard_zookeeper.layout import EPOCH_SIZE, Paths, job_id
from jobboard_zookeeper.ops import Create, OutcomeUnknown
from jobboard_zookeeper.zk import ZooKeeper

DEPENDENCY_RACE_RETRIES = 5


class Poster:
    """Allocates job ids and writes postings for one board."""

    def __init__(self, zk: ZooKeeper, paths: Paths) -> None:
        self._zk, self._paths = zk, paths
        self._epoch = 0

    async def open(self) -> None:
        """Find the current counter (a new one is started before a version could overflow)."""
        counters = await self._zk.children(self._paths.dir("counters"))
        epochs = [int(name[2:]) for name in (counters[0] if counters else []) if name[2:].isdigit()]
        self._epoch = max(epochs, default=0)
        await self._zk.ensure_path(self._paths.counter(self._epoch))

    async def next_sequence(self) -> int:
        while True:
            epoch = self._epoch
            version = await self._zk.bump(self._paths.counter(epoch))
            if version < EPOCH_SIZE:
                return epoch * EPOCH_SIZE + version
            await self._zk.ensure_path(self._paths.counter(epoch + 1))
            self._epoch = max(self._epoch, epoch + 1)

    async def post(self, posting: Posting, raw: bytes) -> tuple[str, int]:
        """Store an encoded posting; returns its id and sequence.

        :raises InvalidJob: a dependency is not on the board (nothing is written).
        """
        sequence = await self.next_sequence()
        new_id = job_id(posting.priority, sequence)
        for _ in range(DEPENDENCY_RACE_RETRIES):
            ops = await self._ops(new_id, raw, posting.depends_on)
            if await self._write(new_id, ops, posting.token):
                return new_id, sequence
        raise InvalidJob(f"job {posting.name!r}: its dependencies kept changing while it was posted")

    async def _ops(self, new_id: str, raw: bytes, depends_on: tuple[str, ...]) -> list[Create]:
        if not depends_on:
            return [Create(self._paths.job(new_id), raw)]
        ops = [Create(self._paths.waiting(new_id), raw)]
        parents = await asyncio.gather(*map(self.locate, depends_on))
        for dependency, parent in zip(depends_on, parents, strict=True):
            if parent is None:
                raise InvalidJob(f"dependency {dependency} is not on the board (consumed, trashed or unknown)")
            ops.append(Create(f"{parent}/{new_id}"))
        return ops

    async def locate(self, job: str) -> str | None:
        """The path of a job on the board (``waiting/`` or ``jobs/``), or ``None``.

        Jobs only move waiting -> jobs -> gone, so reading in that order cannot
        miss a job that moves between the two reads.
        """
        for path in (self._paths.waiting(job), self._paths.job(job)):
            if await self._zk.exists(path) is not None:
                return path
        return None

    async def _write(self, new_id: str, ops: list[Create], token: str) -> bool:
        """True once the posting is stored (recognising our own earlier write)."""
        try:
            result = await self._zk.multi(ops)
        except OutcomeUnknown:
            return await self._posted(new_id, token)
        failure = result.failure()
        if failure is None:
            return True
        if failure[1] == "NodeExists" and failure[0] is ops[0]:
            return await self._posted(new_id, token)
        return False

    async def _posted(self, new_id: str, token: str) -> bool:
        for path in (self._paths.job(new_id), self._paths.waiting(new_id)):
            found = await self._zk.get(path)
            try:
                if found is not None and decode_posting(found[0]).token == token:
                    return True
            except MalformedEntry:
                continue
        return False
