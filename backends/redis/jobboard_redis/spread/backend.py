"""A ``redis://`` board spread over the masters of a Redis Cluster: ``?cluster=1&partitions=K``.

The board is K partitions, each a whole board of its own (the same layout, scripts and session) under its
own hash tag, so in its own slot, on a master chosen for an even spread (:mod:`.layout`); every script
still runs inside one slot. A job's id names its partition (id mod K), so every call about a job goes to one
partition. Where a job goes when posted:

- with a group: the group's partition (``CRC16(group) mod K``), where its limit and permits are kept
  (:mod:`.flow`), whatever its key or dependencies;
- else with a key: the key's partition (``CRC16(key) mod K``). A key's record is always there, the one arbiter
  of the key (:mod:`.keys`): one job per key from any board, whatever group each post names;
- else with dependencies: its first dependency's partition;
- else: the board's home partition (each board of a fleet gets the next one at open); with ``order=exact``, the
  next partition in turn, so that one poster spreads its jobs over every master (a ``post_many`` call's plain
  jobs go to one partition together).

A dependency in another partition than its dependent is linked across partitions (:mod:`.links`).
A job's id is the server's clock in microseconds when it was posted (above its partition's last id, and
rounded up to k mod K: it names its partition k), so ages compare across partitions as far as the masters'
clocks agree (exactly on one host).

Claims (:mod:`.claims`) look in the home partition first, then steal from the others in turn: order is
priority then age exactly within a partition, and a board takes its home's jobs before better ones elsewhere;
``order=exact`` takes the best of the partitions' heads instead (priority then age across the board, for a
head read from every partition at each claim). Each partition keeps its own session for the board (a heartbeat per partition); listings, counts,
the trash and purges are read from every partition and merged; entities live in partition 0.
Docs: docs/backends/redis.md ("Spreading one board over the shards").
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import AsyncIterator, Awaitable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import anyio

from jobboard.backend import (
    Backend,
    BoardServices,
    Claim,
    Entity,
    Job,
    JobState,
    ListedJob,
    Outcome,
    Prepared,
    Progress,
    Settle,
    TrashedJob,
)
from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.board.services import wait_ended
from jobboard_redis.board import RedisBackend
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread.claims import HomeClaims, SpreadClaims, give_back_soon, score_of
from jobboard_redis.spread.flow import SpreadFlow
from jobboard_redis.spread.keys import Keys
from jobboard_redis.spread.layout import open_layout
from jobboard_redis.spread.links import Forwarder
from jobboard_redis.spread.posts import Posts

__all__ = ["SpreadBackend"]

T = TypeVar("T")
RACED = 0.05
"""Seconds ``wait`` gives a partition whose head was better to answer (it has work: at once, unless taken)."""


class SpreadBackend(Backend):
    """K partitions (:class:`RedisBackend` each) of one board; see the module docstring."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.options = parse_redis_url(url)
        self.use_options(self.options)
        self.parts: list[RedisBackend] = []
        self.home = 0
        self.exact = self.options.order == "exact"
        self.links = Forwarder([], self.part_of)
        self.keys = Keys([], self.part_of, self.links)
        self.posts = Posts([], self.part_of, self.links, self.keys)
        self.claims: SpreadClaims | HomeClaims = SpreadClaims([])
        self.flow = SpreadFlow([])

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        layout = await open_layout(self.options)
        self.home = layout.home
        parts = [RedisBackend(self.url, root=root) for root in layout.roots]
        for part in parts:  # one hub for the board: every partition's events in one stream
            services = BoardServices(self.url)
            services.hub, services.reported = self.services.hub, self.services.reported
            part.bind(services)
        opened = await asyncio.gather(*(part.open() for part in parts), return_exceptions=True)
        failed = [error for error in opened if isinstance(error, BaseException)]
        if failed:
            await asyncio.gather(*(part.aclose() for part in parts), return_exceptions=True)
            raise failed[0]
        self.parts, self._open = parts, True
        self.links = Forwarder(parts, self.part_of)
        self.keys = Keys(parts, self.part_of, self.links)
        self.posts = Posts(parts, self.part_of, self.links, self.keys, home=self.home, exact=self.exact)
        self.flow = SpreadFlow(parts)
        self.claims = SpreadClaims(parts) if self.exact else HomeClaims(parts, self.home)
        for part in parts:
            part.forward = self.links.forward
        self.services.spawn(self.links.sweep_forever(self.keys.sweep))

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        await self.services.cancel_tasks()
        await asyncio.gather(*(part.aclose() for part in self.parts))

    # -- routing ---------------------------------------------------------------

    def part_of(self, job_id: str) -> RedisBackend:
        """The partition holding ``job_id`` (partition 0 for what is not an id: it finds nothing)."""
        return self.parts[int(job_id) % len(self.parts) if job_id.isascii() and job_id.isdigit() else 0]

    async def _each(self, calls: Sequence[Awaitable[T]]) -> list[T]:
        return list(await asyncio.gather(*calls))

    # -- writes -------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        return await self.posts.post(prepared)

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        return await self.posts.post_many(batch)

    async def claim(self, job_id: str, owner: str) -> Claim:
        return await self.part_of(job_id).claim(job_id, owner)

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        with self.services.counting_once():  # what the partitions' claims passed over, once per why
            return await self.claims.claim_next(owner, names)

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        if not isinstance(self.claims, HomeClaims):  # order=exact: the board's best head, one claim after another
            return await super().claim_many(owner, names, count)
        with self.services.counting_once():
            return await self.claims.claim_many(owner, names, count, self._give_back)

    @property
    def claims_many_at_once(self) -> bool:  # order=home: the home partition's in one call
        return not self.exact

    def _give_back(self, claim: Claim) -> None:
        give_back_soon(self.part_of(claim.job.id), claim)

    async def release(self, claim: Claim) -> None:  # in the claim's partition, its attempt uncounted
        await self.part_of(claim.job.id).release(claim)

    @property
    def reports_held_back(self) -> bool:
        return True

    async def settle(self, claim: Claim, settle: Settle) -> None:
        await self.part_of(claim.job.id).settle(claim, settle)

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        with self.services.counting_once():
            return await self.claims.consume_and_claim_next(self.part_of(claim.job.id), claim, settle, names)

    async def watch_claim(self, claim: Claim) -> str:
        return await self.part_of(claim.job.id).watch_claim(claim)

    async def claim_lost(self, claim: Claim) -> str | None:  # the partition's: its generation and session too
        return await self.part_of(claim.job.id).claim_lost(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        await self.part_of(job_id).cancel(job_id, reason)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self.part_of(claim.job.id).report_progress(claim, progress)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        return await self.keys.requeue(self.part_of(job_id), job_id, reset_attempts)  # a key elsewhere: taken again

    async def purge(self, older_than: float) -> int:
        return sum(await self._each([part.purge(older_than) for part in self.parts]))

    # -- reading -------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        return await self.part_of(job_id).get(job_id)

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.listing(only_unclaimed):
            yield listed.job

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        """Every partition's listing, merged in priority-then-age order (each is read whole first)."""
        lists = await self._each([_collect(part.listing(only_unclaimed)) for part in self.parts])
        for listed in heapq.merge(*lists, key=lambda item: (item.job.priority.rank, item.job.sequence)):
            yield listed

    async def state(self, job_id: str) -> JobState:
        return await self.part_of(job_id).state(job_id)

    async def owner(self, job_id: str) -> str | None:
        return await self.part_of(job_id).owner(job_id)

    async def job_count(self) -> int:
        return sum(await self._each([part.job_count() for part in self.parts]))

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        lists = await self._each([_collect(part.trashed()) for part in self.parts])
        for item in sorted((item for items in lists for item in items), key=lambda item: item.trashed_at):
            yield item

    def could_be_job_id(self, job_id: str) -> bool:
        return self.parts[0].could_be_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        """Past its partition's last id (which its ``seq`` holds)."""
        if not self.could_be_job_id(job_id):
            return True
        part = self.part_of(job_id)
        return int(job_id) > int(await part.client.command("GET", part.options.prefix + "seq") or 0)

    # -- waiting -------------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        """Waits on every partition at once (each registers this board as waiting there); the first with work
        answers, the others are cancelled. With ``order=exact``, its jobs are returned up to the first that another
        partition's head beats (board order, as claim_next takes them); if that is the first, waited for again."""
        jobs, claims = await self._first_work(names), self.claims
        if not isinstance(claims, SpreadClaims):
            return jobs
        for _ in range(4 * len(self.parts)):
            there = self.part_of(jobs[0].id)
            others = [part for part in self.parts if part is not there]
            heads = await asyncio.gather(*(claims.head(part, names) for part in others))
            beaten, better = min(((score, index) for index, score in enumerate(heads) if score is not None),
                                 default=(math.inf, -1))
            kept = _before(jobs, beaten)
            if kept:
                return kept
            with anyio.move_on_after(RACED):  # that partition has work: its wait answers at once
                jobs = await others[better].wait(names)
                continue
            jobs = await self._first_work(names)  # taken meanwhile
        return jobs

    async def _first_work(self, names: Collection[str] | None) -> list[Job]:
        """The first partition's answer; the other waits are cancelled and waited for (not past a cancellation
        of the caller: they end in the background). Not ``gather``: the caller's cancel scope cancelled while it
        waits would get a waiter's CancelledError, not its own, and let it out (the caller's task ended)."""
        tasks = [asyncio.ensure_future(part.wait(names)) for part in self.parts]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for task in tasks:
                task.cancel()
            await wait_ended(tasks)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self.part_of(job_id).wait_for_completion(job_id)

    def observed(self) -> None:
        for part in self.parts:
            part.observed()

    @property
    def events_decoded(self) -> int:
        return sum(part.events_decoded for part in self.parts)

    # -- flow control: a group's limit in its partition, pauses in every one (:mod:`.flow`) ---------------

    async def set_limit(self, limit: LimitSpec) -> None:
        await self.flow.set_limit(limit)

    async def clear_limit(self, group: str) -> bool:
        return await self.flow.clear_limit(group)

    async def limits(self) -> list[GroupLimit]:
        return await self.flow.limits()

    async def pause(self, name: str | None) -> None:
        await self.flow.pause(name)

    async def resume(self, name: str | None) -> None:
        await self.flow.resume(name)

    async def paused(self) -> Paused:
        return await self.flow.paused()

    # -- entities: in partition 0 ----------------------------------------------

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self.parts[0].register_entity(name, metadata, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self.parts[0].unregister_entity(name)

    async def entities(self) -> list[Entity]:
        return await self.parts[0].entities()


def _before(jobs: list[Job], beaten: float) -> list[Job]:
    """The first ``jobs`` (in board order) whose score is below ``beaten``."""
    return list(itertools.takewhile(lambda job: score_of(job) < beaten, jobs))


async def _collect(items: AsyncIterator[T]) -> list[T]:
    return [item async for item in items]
