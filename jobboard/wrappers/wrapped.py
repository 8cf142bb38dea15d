"""A backend that forwards every call to another backend: the base of backend wrappers.

Subclasses (:class:`~jobboard.wrappers.faulty.FaultyBackend`, :class:`~jobboard.observe.tracing.TracedBackend`)
override what they change and inherit the rest; every operation of the interface is forwarded here
(an operation added to the interface must be added here too, or the wrapper gets the interface's
default instead of the inner backend's: ``tests/board/test_wrapped.py`` checks none is missed). A
wrapper sits between the board (which has checked and encoded the request) and the backend (which does
the I/O), so what it injects or observes happens where a backend's own behaviour would, the same for
every backend. ``consume_and_claim_next`` is not forwarded whole: the interface's default calls the
wrapper's own ``settle`` and ``claim_next``, so a wrapper sees both parts; likewise ``claim_many`` and
``release`` where the inner backend has only the interface's default (a loop of ``claim_next``, an
abandon), and are forwarded whole where it implements them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from typing import Any

from jobboard.backend import Backend, BoardServices, GroupLimit, LimitSpec, Paused, Prepared, Settle
from jobboard.job import Claim, Entity, Job, JobState, ListedJob, Outcome, Progress, TrashedJob


class WrappedBackend(Backend):
    """Forwards to ``inner`` (opened by :meth:`open` unless it is open already; closed with this one).

    A wrapper and its inner backend share one :class:`~jobboard.backend.BoardServices`: a board over the
    wrapper and a board over the inner backend see the same events."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.max_posting_bytes = inner.max_posting_bytes
        self.default_max_attempts = inner.default_max_attempts
        self.key_retention = inner.key_retention
        self.result_ttl, self.trash_ttl = inner.result_ttl, inner.trash_ttl

    def bind(self, services: BoardServices) -> None:
        self.services = self.inner.services if hasattr(self.inner, "services") else services
        if not hasattr(self.inner, "services"):
            self.inner.bind(services)

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def ensure_open(self) -> None:
        self.inner.ensure_open()

    async def open(self) -> None:
        if not self.inner.is_open:
            await self.inner.open()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def observed(self) -> None:
        self.inner.observed()

    async def post(self, prepared: Prepared) -> Job:
        return await self.inner.post(prepared)

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        return await self.inner.post_many(batch)

    async def claim(self, job_id: str, owner: str) -> Claim:
        return await self.inner.claim(job_id, owner)

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        return await self.inner.claim_next(owner, names)

    async def settle(self, claim: Claim, settle: Settle) -> None:
        await self.inner.settle(claim, settle)

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        if self.inner.claims_many_at_once:
            return await self.inner.claim_many(owner, names, count)
        return await super().claim_many(owner, names, count)  # this wrapper's claim_next, in a loop

    @property
    def claims_many_at_once(self) -> bool:
        return self.inner.claims_many_at_once

    async def release(self, claim: Claim) -> None:
        if self.inner.releases_uncounted:
            await self.inner.release(claim)
        else:
            await super().release(claim)  # an abandon, through this wrapper's settle

    @property
    def releases_uncounted(self) -> bool:
        return self.inner.releases_uncounted

    async def claim_lost(self, claim: Claim) -> str | None:
        return await self.inner.claim_lost(claim)

    async def watch_claim(self, claim: Claim) -> str:
        return await self.inner.watch_claim(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        await self.inner.cancel(job_id, reason)

    async def get(self, job_id: str) -> Job:
        return await self.inner.get(job_id)

    def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        return self.inner.iterjobs(only_unclaimed)

    def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        return self.inner.listing(only_unclaimed)

    async def state(self, job_id: str) -> JobState:
        return await self.inner.state(job_id)

    async def owner(self, job_id: str) -> str | None:
        return await self.inner.owner(job_id)

    async def job_count(self) -> int:
        return await self.inner.job_count()

    def trashed(self) -> AsyncIterator[TrashedJob]:
        return self.inner.trashed()

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self.inner.wait(names)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self.inner.wait_for_completion(job_id)

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self.inner.register_entity(name, metadata, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self.inner.unregister_entity(name)

    async def entities(self) -> list[Entity]:
        return await self.inner.entities()

    def could_be_job_id(self, job_id: str) -> bool:
        return self.inner.could_be_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        return await self.inner.never_posted(job_id)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self.inner.report_progress(claim, progress)

    async def purge(self, older_than: float) -> int:
        return await self.inner.purge(older_than)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        return await self.inner.requeue(job_id, reset_attempts)

    @property
    def flow_control(self) -> bool:
        return self.inner.flow_control

    @property
    def reports_held_back(self) -> bool:
        return self.inner.reports_held_back

    def passed_over(self, whys: Iterable[str]) -> None:
        self.inner.passed_over(whys)

    async def set_limit(self, limit: LimitSpec) -> None:
        await self.inner.set_limit(limit)

    async def clear_limit(self, group: str) -> bool:
        return await self.inner.clear_limit(group)

    async def limits(self) -> list[GroupLimit]:
        return await self.inner.limits()

    async def pause(self, name: str | None) -> None:
        await self.inner.pause(name)

    async def resume(self, name: str | None) -> None:
        await self.inner.resume(name)

    async def paused(self) -> Paused:
        return await self.inner.paused()
