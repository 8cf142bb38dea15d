"""Entities (live workers) on ZooKeeper: ephemeral nodes under ``<root>/entities``.

They go with the session that made them; after a session expiry the board
registers its entities again (:meth:`Entities.restore`).
"""

from __future__ import annotations

from jobboard.board.codec import decode_value
from jobboard.errors import InvalidJob
from jobboard.job import Entity
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.ops import Create, Delete
from jobboard_zookeeper.zk import ZooKeeper


class Entities:
    """The entities one board registered, and the listing of everyone's."""

    def __init__(self, zk: ZooKeeper, paths: Paths) -> None:
        self._zk, self._paths = zk, paths
        self._mine: dict[str, bytes] = {}

    async def register(self, name: str, data: bytes) -> None:
        if "/" in name:
            raise InvalidJob(f"entity name {name!r} may not contain '/'")
        await self._put(name, data)
        self._mine[name] = data

    async def _put(self, name: str, data: bytes) -> None:
        path = self._paths.entity(name)
        result = await self._zk.multi([Create(path, data, ephemeral=True)], retry_safe=True)
        if not result.ok:  # a stale registration (ours or a dead worker's): replace it
            await self._zk.multi([Delete(path), Create(path, data, ephemeral=True)], retry_safe=True)

    async def restore(self) -> None:
        """Register again what this board had registered (after a new session)."""
        for name, data in list(self._mine.items()):
            await self._put(name, data)

    async def unregister(self, name: str) -> None:
        if self._mine.pop(name, None) is not None:
            await self._zk.multi([Delete(self._paths.entity(name))], retry_safe=True)

    async def listing(self) -> list[Entity]:
        children = await self._zk.children(self._paths.dir("entities"))
        found = []
        for name in sorted(children[0] if children else []):
            node = await self._zk.get(self._paths.entity(name))
            if node is not None:
                metadata = decode_value(node[0]) if node[0] else {}
                found.append(Entity(name, metadata if isinstance(metadata, dict) else {}))
        return found
