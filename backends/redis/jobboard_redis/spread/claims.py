"""Claiming on a spread board (docs/backends/redis.md, "Spreading one board over the shards").

:class:`HomeClaims` (``order=home``, the default): the board's home partition first, then the best head of the
others (stealing when home has nothing, as :class:`SpreadClaims` over them): one partition, so one master, per
claim while home has work. Priority then
age exactly within a partition; across partitions a board takes its home's jobs before better ones elsewhere.

:class:`SpreadClaims` (``order=exact``): each claim first reads every partition's head (``ZRANGE <index> 0 0 WITHSCORES`` of ``ready``, or of each
named set, and of ``delayed``: one pipelined read per partition, all partitions at once), makes due delayed
jobs ready where there are some (``promote``), then claims in the partition whose head is best (its
``claim_next`` script takes that partition's head). Scores are ``rank * 2^50 + id`` in every partition and
ids follow the masters' clocks, so the order is priority then age across the board, exactly for calls one
after another. Under concurrency it relaxes by one round trip: a job posted or readied in another partition
after the heads were read may be passed over for the one claimed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Iterable, Sequence
from typing import Any

import anyio

from jobboard.backend import Claim, Job, Settle, SettleAction
from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_redis.board import RedisBackend

logger = logging.getLogger(__name__)

STEAL_WAIT = 0.25
"""Seconds a ``claim_many`` with claims from its home partition in hand spends stealing more (a steal is two
round trips: far less unless a master elsewhere is slow or failing over)."""
ROUNDS = 3
"""Head reads before claiming in every partition in turn (a lost race to a head is read again)."""
DUE_MARGIN_MS = 50.0
"""A delayed head due within this (by our estimate of the server's clock) is promoted before comparing."""


def give_back_soon(part: RedisBackend, claim: Claim) -> None:
    """Release ``claim`` (of ``part``) in the background, if ``part`` is open: a failure is logged, as the claim
    goes back at its session's end anyway."""
    if part.is_open:
        part._spawn(_give_back(part, claim))


async def _give_back(part: RedisBackend, claim: Claim) -> None:
    try:
        await part.release(claim)
    except JobBoardError as error:
        logger.warning("claim of job %s not given back (it goes back at its session's end): %s", claim.job.id, error)


def score_of(job: Job) -> float:
    """A job's order score, as its partition's index holds it."""
    return float(job.priority.rank * 2**50 + job.sequence)


def _indexes(part: RedisBackend, names: Collection[str] | None) -> list[str]:
    prefix = part.options.prefix
    return [prefix + "ready"] if names is None else [f"{prefix}rn:{name}" for name in sorted(names)]


class HomeClaims:
    """``claim_next`` and the fused consume-and-claim of a spread board over ``parts``, home first."""

    def __init__(self, parts: Sequence[RedisBackend], home: int) -> None:
        self.parts = parts
        self.order = [parts[(home + step) % len(parts)] for step in range(len(parts))]
        self.steal = SpreadClaims(self.order[1:], skip_failed=True)
        """Home empty: the best head of the others (a fixed order of stealing would starve the last one); a
        partition that cannot be read (its master failing over) is skipped."""

    async def claim_next(self, owner: str, names: Collection[str] | None, *,
                         skip: RedisBackend | None = None) -> Claim | None:
        """Home first (``skip``: home just found empty), then the other partitions' best head."""
        home = self.order[0]
        if home is not skip and (claim := await home.claim_next(owner, names)) is not None:
            return claim
        return await self.steal.claim_next(owner, names)

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int,
                         give_back: Callable[[Claim], None]) -> list[Claim]:
        """Up to ``count`` claims: the home partition's best in one call, then (home short) the other partitions'
        best heads one ``claim_next`` at a time, as many ``claim_next`` calls would. With claims from home in
        hand, stealing more takes at most :data:`STEAL_WAIT` and a failed steal ends it: a master slow or failing
        over elsewhere does not hold back (nor fail) the claims made. Cancelled, the claims made are given to
        ``give_back`` (released in the background)."""
        claims = await self.order[0].claim_many(owner, names, count)
        try:
            with anyio.move_on_after(STEAL_WAIT if claims else None):
                while len(claims) < count and (claim := await self.steal.claim_next(owner, names)) is not None:
                    claims.append(claim)
        except JobBoardError:
            if not claims:
                raise
        except BaseException:
            for made in claims:
                give_back(made)
            raise
        return claims

    async def consume_and_claim_next(self, part: RedisBackend, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """One fused call in the home partition (then the others if it had nothing); elsewhere a settle, then a
        claim home first."""
        if part is not self.order[0] or settle.action is not SettleAction.CONSUME:
            await part.settle(claim, settle)
            return None if names is not None and not names else await self.claim_next(claim.owner, names)
        following = await part.consume_and_claim_next(claim, settle, names)
        if following is not None or (names is not None and not names):
            return following
        return await self.claim_next(claim.owner, names, skip=part)


class SpreadClaims:
    """``claim_next`` and the fused consume-and-claim of a spread board over ``parts``, the best head first."""

    def __init__(self, parts: Sequence[RedisBackend], *, skip_failed: bool = False) -> None:
        self.parts = parts
        self.skip_failed = skip_failed
        """Compare the partitions that answered (stealing); raise only when none did and nothing was claimed.
        Without it (``order=exact``, which reads every partition by design) any failed read raises."""
        self.reads = 0
        """Head reads made (``benchmarks.redis_spread`` counts them)."""

    async def head(self, part: RedisBackend, names: Collection[str] | None,
                   parked: set[RedisBackend] | None = None) -> float | None:
        """The best score among ``part``'s heads (``None``: nothing claimable there); due delayed jobs, and jobs
        parked by a rate whose permit is due, readied first. ``parked`` gains ``part`` if flow control holds
        jobs parked there (``hk``: flow.lua), out of its heads."""
        indexes = _indexes(part, names)
        commands: list[list[Any]] = [["ZRANGE", key, 0, 0, "WITHSCORES"] for key in indexes]
        timers: list[list[Any]] = [["ZRANGE", part.options.prefix + key, 0, 0, "WITHSCORES"] for key in ("delayed", "rdue")]
        replies = await part.client.pipeline([*commands, *timers, ["SCARD", part.options.prefix + "hk"]])
        self.reads += 1  # rdue: a rate's parked jobs (flow.lua)
        if parked is not None and int(replies[-1]):
            parked.add(part)
        server_now = time.time() * 1000 + part.session.server_offset_ms
        if any(due and float(due[1]) <= server_now + DUE_MARGIN_MS for due in replies[len(commands):-1]):
            await part._call("promote", "")
            replies = await part.client.pipeline(commands)
        scores = [float(reply[1]) for reply in replies[:len(commands)] if reply]
        return min(scores) if scores else None

    async def best(self, names: Collection[str] | None,
                   parked: set[RedisBackend] | None = None) -> RedisBackend | None:
        """The partition whose head is best now (``None``: every partition is empty, or with ``skip_failed``
        every one that answered); ``parked`` gains those with parked jobs. :raises JobBoardError: a read failed
        (``skip_failed``: every read did)."""
        heads = await _reads(self.head(part, names, parked) for part in self.parts)
        failed = [head for head in heads if isinstance(head, BaseException)]
        for error in failed:
            if not isinstance(error, Exception):  # a cancellation
                raise error
        if failed and (not self.skip_failed or len(failed) == len(heads)):
            raise failed[0]
        found = [(head, index) for index, head in enumerate(heads) if isinstance(head, float)]
        return self.parts[min(found)[1]] if found else None

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        """The best head's claim. What flow control held back is counted by the partitions it claims in, and
        by those seen holding jobs parked (out of their heads: one call each, only then)."""
        if names is not None and not names:
            return None
        parked: set[RedisBackend] = set()
        part, claim = await self._best_claim(owner, names, parked)
        await self._passed(parked, part, claim, names)
        return claim

    async def _best_claim(self, owner: str, names: Collection[str] | None,
                          parked: set[RedisBackend]) -> tuple[RedisBackend | None, Claim | None]:
        """The claim made and the partition it is in."""
        for _ in range(ROUNDS):
            part = await self.best(names, parked)
            if part is None:
                return None, None
            claim = await part.claim_next(owner, names)
            parked.discard(part)  # it counted its own
            if claim is not None:
                return part, claim
        return await self._any(owner, names)

    @staticmethod
    async def _passed(parked: set[RedisBackend], part: RedisBackend | None, claim: Claim | None,
                      names: Collection[str] | None) -> None:
        """The partitions holding jobs parked and not claimed in count why those better than ``claim`` (made in
        ``part``) are. A count is no reason to lose the claim: one that cannot be made (``BackendUnavailable``)
        is left out, and cancelled, the claim goes back (in the background) before the cancellation goes on."""
        score = None if claim is None else score_of(claim.job)
        try:
            for held in parked:
                try:
                    await held.passed_before(score, names)
                except BackendUnavailable as error:
                    logger.warning("what a claim passed over in %s not counted: %s", held.options.root, error)
        except BaseException:
            if part is not None and claim is not None:
                give_back_soon(part, claim)
            raise

    async def _any(self, owner: str, names: Collection[str] | None) -> tuple[RedisBackend | None, Claim | None]:
        """Raced every time: any partition's best, in turn (``skip_failed``: past those that fail, raising the
        last failure only when every partition failed)."""
        failures: list[JobBoardError] = []
        for part in self.parts:
            try:
                claim = await part.claim_next(owner, names)
            except JobBoardError as error:
                if not self.skip_failed:
                    raise
                failures.append(error)
                continue
            if claim is not None:
                return part, claim
        if failures and len(failures) == len(self.parts):
            raise failures[-1]
        return None, None

    async def consume_and_claim_next(self, part: RedisBackend, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """One fused call when the consumed job's partition has the best head; else a settle, then a claim."""
        if names is not None and not names:
            await part.settle(claim, settle)
            return None
        parked: set[RedisBackend] = set()
        best = await self.best(names, parked) if settle.action is SettleAction.CONSUME else None
        if best is not None:
            parked.discard(best)  # it counts its own
        if best is part:
            following = await part.consume_and_claim_next(claim, settle, names)
        else:
            await part.settle(claim, settle)
            following = await best.claim_next(claim.owner, names) if best is not None else None
        if following is None:
            return await self.claim_next(claim.owner, names)
        await self._passed(parked, best, following, names)
        return following


async def _reads(calls: Iterable[Coroutine[Any, Any, float | None]]) -> list[float | None | BaseException]:
    """The reads' results or errors, in order (as ``gather(..., return_exceptions=True)``), but a cancellation
    of the caller ends the wait at once: the reads are cancelled and left to end in the background (nothing to
    undo), so one cancellation of a cancel scope is enough. A gather waits for its children first, meanwhile
    anyio delivers the scope's cancellation again, and the extra requests outlived the scope: the conformance
    case of a cancelled ``claim_next`` saw a CancelledError leave ``move_on_after`` on ``order=exact``."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
            task.add_done_callback(_retrieved)
        raise
    return [asyncio.CancelledError() if task.cancelled() else (task.exception() or task.result()) for task in tasks]


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A read left to end in the background: its outcome taken (never reported as unretrieved)."""
    if not task.cancelled():
        task.exception()
