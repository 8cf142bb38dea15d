"""Flow control on a spread board (``?cluster=1&partitions=K``; docs/backends/redis.md, "Flow control").

Every job posted with a group lives in the group's partition (``CRC16(group) mod K``, :func:`group_index`),
so each partition is a whole flat board for its groups: the check and the claim are one ``FCALL`` in one
slot (``flow.lua``), and a permit is a claim there. A group's limit, its permits (``gr:<g>``), its
sequence (``gm:<g>``) and its rate log are kept in that partition only: ``set_limit`` and ``clear_limit``
are one call there (atomic, as on one slot), and the other partitions keep no ``lim`` key, so their claims
stay on the path of a board without flow control.

A pause concerns a job name, whose jobs are in every partition: ``pause`` and ``resume`` write every
partition, one call each, partition 0 last; between the calls some partitions already refuse (or already
grant) the name's claims. :meth:`SpreadFlow.paused` reads every partition (one call each, at once) and shows a
name paused when ANY partition holds it paused: it never hides a pause. Each call takes an order first: the
partitions' last applied orders of the name (``pzv``) are read, then one script in partition 0 raises the
counter ``pzo`` to their maximum if it is lower and increments it (:data:`NEXT_ORDER`), so every order is a
value of one monotonic counter, unique, and above what any partition applied (a failover of partition 0 that
lost the last increments does not rewind it). A partition ignores an order not newer than the name's last
applied there: of racing calls, the latest ordered holds in every partition once all returned.

Interrupted calls: the fan-out is shielded from cancellation (a cancelled caller's call still writes every
partition, for up to :func:`finish_within` seconds, then re-raises the cancellation). A call that failed
part-way (a partition unreachable) or whose process died half-way leaves the partitions it reached changed
and the others not: a pause shows in ``paused()`` (partitions that hold it refuse the name, the others still
grant it); a resume still shows the name paused while any partition holds it (partitions already resumed
grant it). Either way ``paused()`` shows the name and the operator repeats the call to settle the board.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio

from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.board.services import wait_ended
from jobboard.errors import BackendUnavailable
from jobboard_redis.board import RedisBackend
from jobboard_redis.spread.layout import partition_of

__all__ = ["NEXT_ORDER", "SpreadFlow", "finish_within", "group_index"]

logger = logging.getLogger(__name__)

NEXT_ORDER = ("local m = tonumber(ARGV[1]) "
              "if tonumber(redis.call('GET', KEYS[1]) or '0') < m then redis.call('SET', KEYS[1], m) end "
              "return redis.call('INCR', KEYS[1])")
"""``pzo`` raised to ``ARGV[1]`` (the partitions' highest applied order) if lower, then incremented: atomic
and monotonic, so no two calls share an order."""


def finish_within(parts: Sequence[RedisBackend]) -> float:
    """How long a shielded fan-out may run: two calls one after another, each within its retry window, and
    5 s more."""
    return 2 * max(part.options.retry_window for part in parts) + 5.0


def group_index(group: str, count: int) -> int:
    """The partition (of ``count``) holding every job of ``group``, its limit and its permits."""
    return partition_of(group, count)


class SpreadFlow:
    """Limits and pauses of a spread board over ``parts`` (the partitions, in order)."""

    def __init__(self, parts: Sequence[RedisBackend]) -> None:
        self.parts = parts

    def home_of(self, group: str) -> RedisBackend:
        return self.parts[group_index(group, len(self.parts))]

    async def set_limit(self, limit: LimitSpec) -> None:
        """One call in the group's partition: atomic. Then warns of the group's jobs left in other partitions
        (:meth:`outside`): the limit does not hold them (docs/backends/redis.md, "Upgrading a spread board")."""
        await self.home_of(limit.group).set_limit(limit)
        if outside := await self.outside(limit.group):
            logger.warning("group %r: %d of its jobs are in other partitions than its own (posted before groups "
                           "were routed to their partition): its limit does not hold them; let them drain or "
                           "cancel them (docs/backends/redis.md, 'Upgrading a spread board')",
                           limit.group, sum(outside.values()))

    async def outside(self, group: str) -> dict[int, int]:
        """The group's jobs on the board outside its partition, by partition (none once every board posts
        grouped jobs to the group's partition and the older ones are gone): K - 1 reads at once."""
        home = self.home_of(group)
        others = [index for index, part in enumerate(self.parts) if part is not home]
        counts = await asyncio.gather(*(self.parts[index].client.command(
            "ZCARD", self.parts[index].options.prefix + "gm:" + group) for index in others))
        return {index: int(count) for index, count in zip(others, counts, strict=True) if int(count)}

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
        """The next pause-or-resume order of ``name``: every partition's last applied order of it (``pzv``)
        read first, then :data:`NEXT_ORDER` in partition 0 (one script: atomic). A resent script may skip a
        value, never repeat one. :raises JobBoardError: a partition could not be read."""
        zero, field = self.parts[0], name or ""
        applied = await asyncio.gather(*(part.client.command("HGET", part.options.prefix + "pzv", field)
                                         for part in self.parts))
        floor = max(int(found or 0) for found in applied)
        return int(await zero.client.command("EVAL", NEXT_ORDER, 1, zero.options.prefix + "pzo", floor))

    async def paused(self) -> Paused:
        """The board or a name is shown paused when any partition holds it paused (K calls at once, each
        atomic): a call interrupted half-way never hides a pause. :raises JobBoardError: a partition could not
        be read."""
        found = await asyncio.gather(*(part.paused() for part in self.parts))
        return Paused(any(each.board for each in found), frozenset().union(*(each.names for each in found)))

    async def _everywhere(self, call: Callable[[RedisBackend], Awaitable[None]]) -> None:
        """Partitions 1..K-1 at once, then 0, run to their end even if the caller is cancelled meanwhile (up to
        :func:`finish_within`; the cancellation is re-raised after). :raises BackendUnavailable: the fan-out
        outlasted that bound (some partitions may hold the change: repeat the call)."""
        async def fan_out() -> None:
            await asyncio.gather(*(call(part) for part in self.parts[1:]))
            await call(self.parts[0])

        task = asyncio.ensure_future(fan_out())
        interrupted: BaseException | None = None
        deadline = time.monotonic() + finish_within(self.parts)
        with anyio.CancelScope(shield=True):  # anyio's cancellations wait; asyncio's are caught below
            while not task.done() and (left := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait({task}, timeout=left)
                except asyncio.CancelledError as error:
                    interrupted = error
        if not task.done():
            task.cancel()
            await wait_ended([task])
            if interrupted is not None:
                raise interrupted
            raise BackendUnavailable("redis: a spread pause or resume outlasted its bound; repeat it")
        if interrupted is not None:
            raise interrupted
        task.result()
