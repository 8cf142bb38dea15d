"""The parts of a settle that reach beyond the job: its links, dependents and the trash.

* consume delivers the result to each dependent (``set_data``), or moves a
  dependent whose last dependency it was from ``waiting/`` to ``jobs/``;
* trash (and cancel, and the max-attempts trash) moves the job and, recursively,
  every dependent to ``trash/``.

Only operations are built here; :mod:`jobboard_zookeeper.settle` runs them in its multi.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jobboard.board.codec import MalformedEntry, encode_posting
from jobboard_zookeeper.keys import key_settled
from jobboard_zookeeper.layout import Paths, TrashRecord
from jobboard_zookeeper.ops import Check, Create, Delete, Op, SetData
from jobboard_zookeeper.reading import Stored, read_stored
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)


class LinkedOps:
    """Builds the operations that reach a job's dependents (reading them as it goes)."""

    def __init__(self, zk: ZooKeeper, paths: Paths) -> None:
        self._zk, self._paths = zk, paths

    async def delivery_ops(self, job_id: str, result: Any) -> list[Op]:
        """Deliver ``result`` to every dependent; release those it was the last dependency of."""
        job_path = self._paths.job(job_id)
        links = await self._links(job_path)
        dependents = await asyncio.gather(*(self._read_quietly(self._paths.waiting(d)) for d in links))
        parts = await asyncio.gather(*(self._deliver_to(job_id, dependent, result)
                                       for dependent in dependents if dependent is not None))
        ops: list[Op] = [Delete(f"{job_path}/{dependent_id}") for dependent_id in links]
        return ops + [op for part in parts for op in part]  # None: trashed with another dependency

    async def _deliver_to(self, job_id: str, dependent: Stored, result: Any) -> list[Op]:
        posting = dependent.posting.with_result(job_id, result)
        raw = encode_posting(posting)
        if posting.waiting_on:
            return [SetData(dependent.path, raw, dependent.version)]
        return await self._release_ops(dependent.path.rsplit("/", 1)[1], dependent, raw)

    async def _release_ops(self, job_id: str, waiting: Stored, raw: bytes) -> list[Op]:
        """Move a waiting job (with its own links) to ``jobs/``."""
        links = await self._links(waiting.path)
        ops: list[Op] = [Delete(f"{waiting.path}/{link}") for link in links]
        ops += [Delete(waiting.path, waiting.version), Create(self._paths.job(job_id), raw)]
        return ops + [Create(f"{self._paths.job(job_id)}/{link}") for link in links]

    async def trash_ops(self, job_id: str, stored: Stored, reason: str, trashed: set[str] | None = None) -> list[Op]:
        """Trash one job and, recursively, its dependents (without its lock).

        ``trashed`` collects the jobs already in the ops, so that a dependent reached
        through two dependencies (a diamond) is trashed once.
        """
        trashed = set() if trashed is None else trashed
        trashed.add(job_id)
        ops: list[Op] = [Check(stored.path, stored.version),
                         Create(self._paths.trash(job_id), TrashRecord.now(stored.raw, reason).encode())]
        if stored.posting.key is not None:
            ops.append(key_settled(self._paths, job_id, stored.posting.key, stored.raw, trashed=True))
        for dependent_id in await self._links(stored.path):
            ops.append(Delete(f"{stored.path}/{dependent_id}"))
            if dependent_id in trashed:
                continue
            dependent = await self._read_quietly(self._paths.waiting(dependent_id))
            if dependent is not None:
                cause = f"dependency {job_id} ({stored.posting.name}) was trashed: {reason}"
                ops += await self.trash_ops(dependent_id, dependent, cause, trashed)
        return [*ops, Delete(stored.path, stored.version)]

    async def _links(self, path: str) -> list[str]:
        children = await self._zk.children(path)
        return sorted(children[0]) if children else []

    async def _read_quietly(self, path: str) -> Stored | None:
        try:
            return await read_stored(self._zk, path)
        except MalformedEntry:
            logger.warning("malformed waiting job at %s is left alone", path)
            return None
