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
from jobboard.errors import DependencyMissing
from jobboard_redis.board import RedisBackend
from jobboard_redis.cluster import crc16
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread.claims import HomeClaims, SpreadClaims, score_of
from jobboard_redis.spread.flow import SpreadFlow, group_index
from jobboard_redis.spread.keys import Keys
from jobboard_redis.spread.layout import open_layout
from jobboard_redis.spread.links import Forwarder

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
        self.turn = self.home = 0
        self.exact = self.options.order == "exact"
        self.links = Forwarder([], self.part_of)
        self.keys = Keys([], self.part_of, self.links)
        self.claims: SpreadClaims | HomeClaims = SpreadClaims([])
        self.flow = SpreadFlow([])

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        layout = await open_layout(self.options)
        self.turn = self.home = layout.home
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

    def _turn(self) -> int:
        """The partition of the next plain post: home, or (``order=exact``) each in turn."""
        if not self.exact:
            return self.home
        self.turn = (self.turn + 1) % len(self.parts)
        return self.turn

    def _index_of_post(self, prepared: Prepared, plain: int) -> int:
        """Where ``prepared`` goes (``plain``: for a job without key or dependencies)."""
        posting = prepared.posting
        if posting.group:
            return group_index(posting.group, len(self.parts))
        if posting.key is not None:
            return crc16(posting.key.encode()) % len(self.parts)
        if posting.depends_on:
            return self.parts.index(self.part_of(posting.depends_on[0]))
        return plain

    def _linked_elsewhere(self, prepared: Prepared, index: int) -> bool:
        """Whether a dependency of ``prepared`` is in another partition than ``index``."""
        return any(self.part_of(dep) is not self.parts[index] for dep in prepared.posting.depends_on)

    def _alone(self, prepared: Prepared, index: int) -> bool:
        """Whether ``prepared`` (bound for ``index``) takes calls of its own: linked, or keyed, elsewhere."""
        key = prepared.posting.key
        return self._linked_elsewhere(prepared, index) or (key is not None and self.keys.index_of(key) != index)

    async def _each(self, calls: Sequence[Awaitable[T]]) -> list[T]:
        return list(await asyncio.gather(*calls))

    # -- writes -------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        return await self._post_at(self._index_of_post(prepared, self._turn()), prepared)

    async def _post_at(self, index: int, prepared: Prepared) -> Job:
        """Post ``prepared`` in partition ``index``: keyed for another partition, through the key's record there
        (:mod:`.keys`); else one call (and links), a record naming a job elsewhere answering that job."""
        part, key = self.parts[index], prepared.posting.key
        if key is not None and self.keys.index_of(key) != index:
            return await self.keys.post_elsewhere(part, prepared)
        while True:
            if self._linked_elsewhere(prepared, index):
                job = await self.links.post_linked(part, prepared)
            else:
                job = await part.post(prepared)
            if key is None or self.part_of(job.id) is part:
                return job
            if (found := await self.keys.resolve(part, key, job.id)) is not None:
                return found

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """Runs of consecutive postings bound for one partition, one partition's ``post_many`` each: atomic
        per call as on one slot, in order; a missing dependency stops the batch there."""
        jobs: list[Job] = []
        start, plain = 0, self._turn()
        while start < len(batch):
            index = self._index_of_post(batch[start], plain)
            if self._alone(batch[start], index):
                try:
                    jobs.append(await self._post_at(index, batch[start]))
                except DependencyMissing as error:
                    raise error.in_batch(start, jobs) from None
                start += 1
                continue
            end = start + 1
            while (end < len(batch) and self._index_of_post(batch[end], plain) == index
                   and not self._alone(batch[end], index)):
                end += 1
            try:
                posted = await self.parts[index].post_many(batch[start:end])
            except DependencyMissing as error:
                at = start + (error.index or 0)
                message = str(error).split(": ", 1)[-1]
                raise DependencyMissing(f"jobs[{at}]: {message}", index=at, posted=[*jobs, *error.posted]) from None
            for offset, job in enumerate(posted):  # a key's record naming a job elsewhere: that job
                if self.part_of(job.id) is not self.parts[index]:
                    key, again = batch[start + offset].posting.key or "", batch[start + offset]
                    found = await self.keys.resolve(self.parts[index], key, job.id)
                    posted[offset] = found if found is not None else await self._post_at(index, again)
            jobs += posted
            start = end
        return jobs

    async def claim(self, job_id: str, owner: str) -> Claim:
        return await self.part_of(job_id).claim(job_id, owner)

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        return await self.claims.claim_next(owner, names)

    async def settle(self, claim: Claim, settle: Settle) -> None:
        await self.part_of(claim.job.id).settle(claim, settle)

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        return await self.claims.consume_and_claim_next(self.part_of(claim.job.id), claim, settle, names)

    async def watch_claim(self, claim: Claim) -> str:
        return await self.part_of(claim.job.id).watch_claim(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        await self.part_of(job_id).cancel(job_id, reason)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self.part_of(claim.job.id).report_progress(claim, progress)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        return await self.part_of(job_id).requeue(job_id, reset_attempts)

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
        tasks = [asyncio.ensure_future(part.wait(names)) for part in self.parts]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

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
