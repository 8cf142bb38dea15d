"""Flow control on ``redis://`` (issue 27): limits per group, pauses, as a base of ``RedisBackend``.

The limits and pauses are stored in the board's keys, and every claim script checks them in the same call as
the claim (``flow.lua``): a permit is a claim, kept in the group's set of claimed jobs by every script that
starts or ends one. The guarantees are :mod:`jobboard.board.limits`'; the layout is docs/backends/redis.md.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from jobboard.board.limits import GroupLimit, LimitSpec, Paused, Rate
from jobboard.errors import JobBoardError
from jobboard_redis.keep import KeepingRedis
from jobboard_redis.records import text


def spec_text(limit: LimitSpec) -> str:
    """``'<concurrency>|<sequence 1/0>|<rate count>|<rate period ms>'``, empty for what is not set."""
    concurrency = "" if limit.concurrency is None else str(limit.concurrency)
    count, period = ("", "") if limit.rate is None else (str(limit.rate.count), repr(limit.rate.period * 1000))
    return f"{concurrency}|{'1' if limit.sequence else '0'}|{count}|{period}"


def spec_of(group: str, stored: str) -> LimitSpec:
    """The :class:`LimitSpec` of :func:`spec_text`'s text. :raises JobBoardError: not one."""
    try:
        concurrency, sequence, count, period = stored.split("|")
        rate = Rate(int(count), float(period) / 1000) if count else None
        return LimitSpec(group, int(concurrency) if concurrency else None, sequence == "1", rate)
    except ValueError:
        raise JobBoardError(f"the stored limit of group {group!r} is not valid: {stored!r}") from None


def after_events(events: list[Any], held: set[str] | None) -> bool:
    """The elements of a reply past its events (flat, 4 each): ``held`` (if given) gains the whys of
    ``'held:<why>,...'`` (what the call's claims passed over: flow.lua ``passed_over``); whether ``'out'`` is one
    (the partition's outbox has work)."""
    tail = [text(extra) for extra in events[len(events) - len(events) % 4:]]
    if held is not None:
        held.update(why for extra in tail if extra.startswith("held:") for why in extra[5:].split(","))
    return "out" in tail


class FlowingRedis(KeepingRedis):
    """``set_limit``, ``clear_limit``, ``limits``, ``pause``, ``resume`` and ``paused``: each one script call
    (atomic; the ones that can free work wake the boards waiting for it); what a claim passed over, counted."""

    @property
    def reports_held_back(self) -> bool:
        return True

    def _passed(self, held: set[str]) -> None:
        if held:
            self.passed_over(held)

    async def passed_before(self, score: float | None, names: Collection[str] | None) -> None:
        """A spread board's claim took a job of score ``score`` (``None``: none) in another partition: count why
        this partition's parked jobs of ``names`` better than it are held back (one call, flow.lua ``passed``)."""
        held = set[str]()
        await self._call("passed", "", "" if score is None else repr(score), *sorted(names or ()), held=held)
        self._passed(held)

    async def set_limit(self, limit: LimitSpec) -> None:
        await self._call("set_limit", "", limit.group, spec_text(limit))

    async def clear_limit(self, group: str) -> bool:
        _, data = await self._call("clear_limit", self._nonce(), group)  # a resend answers the first call's
        return int(data[0]) > 0

    async def limits(self) -> list[GroupLimit]:
        _, data = await self._call("limits", "")
        found = []
        for group, stored, running, waiting in data:
            name = text(group)
            found.append(GroupLimit.of(spec_of(name, text(stored)), int(running), int(waiting)))
        return sorted(found, key=lambda limit: limit.group)

    async def pause(self, name: str | None, order: int | None = None) -> None:
        """``order``: a spread board's (:mod:`jobboard_redis.spread.flow`): ignored when not newer than the
        name's last pause or resume applied here."""
        await self._call("pause", "", name or "", *([] if order is None else [order]))

    async def resume(self, name: str | None, order: int | None = None) -> None:
        await self._call("resume", "", name or "", *([] if order is None else [order]))

    async def paused(self) -> Paused:
        _, data = await self._call("paused", "")
        board: Any = data[0]
        return Paused(int(board) > 0, frozenset(text(name) for name in data[1]))
