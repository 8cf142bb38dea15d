"""Flow control on ``zookeeper://``: what is stored, and its listing (:class:`FlowAdmin`).

Each write is one multi checked at the version of ``flow/state`` read just before: ``set_data(state)``
plus, for a limit, ``create`` of the group's permits parent and rate window when missing (a rate's window
outlives its limit cleared and set again). A write that conflicts (another one came between) reads again and
retries. Every board's watch on ``flow/`` sees it, and every claim checks the state's version: a limit or
pause written before a claim begins is honoured by it. Clearing a limit keeps the group's nodes (the
permits of running claims go with their claims; a limit set again counts them).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace

from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.errors import BackendUnavailable
from jobboard_zookeeper.flow import Flow, FlowState, window_data
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.ops import Create, Op, OutcomeUnknown, SetData
from jobboard_zookeeper.reading import Reader, Session

WRITE_RETRIES = 20
Change = Callable[[FlowState], Awaitable[tuple[FlowState, list[Op]]]]
"""A write: the new state from the one read, and the ops that go with it."""


class FlowAdmin:
    """``set_limit``, ``clear_limit``, ``limits``, ``pause``, ``resume`` and ``paused`` for one board."""

    def __init__(self, session: Session, paths: Paths, flow: Flow, reader: Reader) -> None:
        self._session, self._paths, self._flow, self._reader = session, paths, flow, reader

    async def set_limit(self, limit: LimitSpec) -> None:
        async def change(state: FlowState) -> tuple[FlowState, list[Op]]:
            limits = tuple(sorted([*(each for each in state.limits if each.group != limit.group), limit],
                                  key=lambda each: each.group))
            return replace(state, limits=limits), await self._nodes(limit)

        await self._write(change)

    async def clear_limit(self, group: str) -> bool:
        found = False

        async def change(state: FlowState) -> tuple[FlowState, list[Op]]:
            nonlocal found
            found = found or state.limit(group) is not None  # (a retry after a lost reply finds it gone)
            return replace(state, limits=tuple(each for each in state.limits if each.group != group)), []

        await self._write(change)
        return found

    async def pause(self, name: str | None) -> None:
        async def change(state: FlowState) -> tuple[FlowState, list[Op]]:
            paused = state.paused
            paused = Paused(True, paused.names) if name is None else Paused(paused.board, paused.names | {name})
            return replace(state, paused=paused), []

        await self._write(change)

    async def resume(self, name: str | None) -> None:
        async def change(state: FlowState) -> tuple[FlowState, list[Op]]:
            paused = state.paused
            paused = Paused(False, paused.names) if name is None else Paused(paused.board, paused.names - {name})
            return replace(state, paused=paused), []

        await self._write(change)

    async def paused(self) -> Paused:
        return (await self._read()).paused

    async def limits(self) -> list[GroupLimit]:
        """Every limit with its permits in use (``running``) and its unclaimed jobs (``waiting``, listed)."""
        state = await self._read()
        if not state.limits:
            return []
        zk = self._session()
        found = await zk.get_many([self._paths.permits(each.group) for each in state.limits])
        waiting: Counter[str | None] = Counter()
        async for job in self._reader.iterjobs(True):
            waiting[job.group] += 1
        return [GroupLimit.of(limit, 0 if node is None else node[1].num_children, waiting[limit.group])
                for limit, node in zip(state.limits, found, strict=True)]

    async def _read(self) -> FlowState:
        """The state as stored now (read after a sync: this call sees every write that returned before it)."""
        await self._session().sync(self._paths.flow("state"))
        self._flow.stale()
        return await self._flow.refresh()

    async def _nodes(self, limit: LimitSpec) -> list[Op]:
        """The group's nodes this limit needs and lacks. A rate's window is kept: it outlives its limit
        cleared or changed (the grants were made; a new count reads the times it holds)."""
        zk, ops = self._session(), list[Op]()
        permits, rate = self._paths.permits(limit.group), self._paths.rate(limit.group)
        found = await asyncio.gather(zk.exists(permits), zk.exists(rate))
        if found[0] is None:
            ops.append(Create(permits))
        if limit.rate is not None and found[1] is None:
            ops.append(Create(rate, window_data([], granted=False)))
        return ops

    async def _write(self, change: Change) -> None:
        """Apply ``change(state) -> (new state, more ops)`` in one multi checked at the state's version.

        :raises BackendUnavailable: it kept conflicting with concurrent writes, or its reply was lost.
        """
        path = self._paths.flow("state")
        for _ in range(WRITE_RETRIES):
            state = await self._read()
            new, ops = await change(state)
            try:
                result = await self._session().multi([SetData(path, new.encode(), state.version), *ops])
            except OutcomeUnknown:
                continue  # applied or not, the next try reads it and writes the same again (idempotent)
            if result.ok:
                self._flow.stale()
                return
        raise BackendUnavailable("changing the flow control kept conflicting with concurrent changes; try again")
