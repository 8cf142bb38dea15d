"""Flow control on a spread board (``?cluster=1&partitions=K``; docs/backends/redis.md, "Flow control").

Every job posted with a group lives in the group's partition (``CRC16(group) mod K``, :func:`group_index`),
so each partition is a whole flat board for its groups: the check and the claim are one ``FCALL`` in one
slot (``flow.lua``), and a permit is a claim there. A group's limit, its permits (``gr:<g>``), its
sequence (``gm:<g>``) and its rate log are kept in that partition only: ``set_limit`` and ``clear_limit``
are one call there (atomic, as on one slot), and the other partitions keep no ``lim`` key, so their claims
stay on the path of a board without flow control.

A pause concerns a job name, whose jobs are in every partition: ``pause`` and ``resume`` write every
partition, one call each, partition 0 last. Partition 0 is the source of truth of :meth:`SpreadFlow.paused`:
once ``paused()`` shows a pause, every partition holds it (between the calls some partitions already
refuse, or already grant, the name's claims); a call that failed part-way is repeated to finish it. Each
call takes an order first (a counter in partition 0, raised above every partition's last applied order of
the name, so a failover losing the counter's last increments does not rewind it) and a partition ignores one
older than the name's last applied there: of a pause and a resume racing, the later ordered one holds in
every partition.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence

from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard_redis.board import RedisBackend
from jobboard_redis.cluster import crc16

__all__ = ["SpreadFlow", "group_index"]


def group_index(group: str, count: int) -> int:
    """The partition (of ``count``) holding every job of ``group``, its limit and its permits."""
    return crc16(group.encode()) % count


class SpreadFlow:
    """Limits and pauses of a spread board over ``parts`` (the partitions, in order)."""

    def __init__(self, parts: Sequence[RedisBackend]) -> None:
        self.parts = parts

    def home_of(self, group: str) -> RedisBackend:
        return self.parts[group_index(group, len(self.parts))]

    async def set_limit(self, limit: LimitSpec) -> None:
        """One call in the group's partition: atomic."""
        await self.home_of(limit.group).set_limit(limit)

    async def clear_limit(self, group: str) -> bool:
        """One call in the group's partition: atomic; whether there was a limit."""
        return await self.home_of(group).clear_limit(group)

    async def limits(self) -> list[GroupLimit]:
        """Every partition's limits (each group's in its own partition only), by group."""
        found = await asyncio.gather(*(part.limits() for part in self.parts))
        return sorted(itertools.chain.from_iterable(found), key=lambda limit: limit.group)

    async def pause(self, name: str | None) -> None:
        """An order from partition 0's counter, then every partition but 0 at once, then partition 0; a
        partition ignores a call older than the name's last one applied there, so of racing calls the last
        ordered wins everywhere. :raises JobBoardError: a partition could not be reached (the others may hold
        the pause: repeat the call)."""
        order = await self._order(name)
        await self._everywhere(lambda part: part.pause(name, order))

    async def resume(self, name: str | None) -> None:
        """As :meth:`pause`, the other way."""
        order = await self._order(name)
        await self._everywhere(lambda part: part.resume(name, order))

    async def _order(self, name: str | None) -> int:
        """The next pause-or-resume order of ``name``: ``INCR`` of ``pzo`` in partition 0, raised above the
        order every partition last applied to the name (``pzv``), and ``pzo`` with it: a failover of partition
        0 that lost its last increments does not make the next calls stale elsewhere."""
        zero, field = self.parts[0], name or ""
        counted = int(await zero.client.command("INCR", zero.options.prefix + "pzo"))
        applied = await asyncio.gather(*(part.client.command("HGET", part.options.prefix + "pzv", field)
                                         for part in self.parts))
        order = max(counted, 1 + max(int(found or 0) for found in applied))
        if order > counted:
            await zero.client.command("SET", zero.options.prefix + "pzo", order)  # caught up
        return order

    async def paused(self) -> Paused:
        """Partition 0's pauses (written last by every pause and resume)."""
        return await self.parts[0].paused()

    async def _everywhere(self, call: Callable[[RedisBackend], Awaitable[None]]) -> None:
        await asyncio.gather(*(call(part) for part in self.parts[1:]))
        await call(self.parts[0])
