"""A board that forwards every call to another board: the base of board wrappers.

Subclasses (:class:`~jobboard.faulty.FaultyBoard`, :class:`~jobboard.tracing.TracedBoard`)
override what they change and inherit the rest, so a method added to the contract is
forwarded without touching each wrapper. The public calls are forwarded whole (the inner board
checks and encodes); ``consume_and_claim_next`` is not: its contract default calls the wrapper's
own ``consume`` and ``claim_next``, so a wrapper sees both parts. The board's hooks for its
backend (``_post``, ``_post_many``, ``_settle``) forward to the inner board's, for a subclass that
lets the contract check and encode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from jobboard.backend import Prepared, Settle
from jobboard.board import JobBoard, JobRef, NewJob
from jobboard.events import DEFAULT_EVENT_BUFFER, EventStream
from jobboard.job import (
    Claim,
    Entity,
    Job,
    JobState,
    LastError,
    ListedJob,
    Outcome,
    Priority,
    TrashedJob,
    When,
)


class WrappedBoard(JobBoard):
    """Forwards to ``inner`` (opened by :meth:`open` unless it is open already; closed with this one)."""

    def __init__(self, inner: JobBoard) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.max_posting_bytes = inner.max_posting_bytes
        self.default_max_attempts = inner.default_max_attempts
        self.key_retention = inner.key_retention
        self.result_ttl, self.trash_ttl = inner.result_ttl, inner.trash_ttl

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def could_be_job_id(self, job_id: str) -> bool:
        return self.inner.could_be_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        return await self.inner.never_posted(job_id)

    async def open(self) -> None:
        if not self.inner.is_open:
            await self.inner.open()
        self._open = True

    async def aclose(self) -> None:
        await self.inner.aclose()
        self._open = False

    async def post(self, name: str, details: Mapping[str, Any] | None = None, *,
                   priority: Priority | int | str = Priority.NORMAL, depends_on: Sequence[JobRef] = (),
                   max_attempts: int | None = None, keep_result: bool = False, key: str | None = None,
                   delay: float | None = None, not_before: When | None = None,
                   result_ttl: float | None = None, trash_ttl: float | None = None) -> Job:
        return await self.inner.post(name, details, priority=priority, depends_on=depends_on,
                                     max_attempts=max_attempts, keep_result=keep_result, key=key,
                                     delay=delay, not_before=not_before, result_ttl=result_ttl, trash_ttl=trash_ttl)

    async def post_many(self, jobs: Sequence[NewJob]) -> list[Job]:
        return await self.inner.post_many(jobs)

    async def _post(self, prepared: Prepared) -> Job:
        return await self.inner._post(prepared)

    async def _post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        return await self.inner._post_many(batch)

    async def _settle(self, claim: Claim, settle: Settle) -> None:
        await self.inner._settle(claim, settle)

    async def get(self, job: JobRef) -> Job:
        return await self.inner.get(job)

    async def iterjobs(self, *, only_unclaimed: bool = False) -> AsyncIterator[Job]:
        async for job in self.inner.iterjobs(only_unclaimed=only_unclaimed):
            yield job

    async def listing(self, *, only_unclaimed: bool = False) -> AsyncIterator[ListedJob]:
        async for item in self.inner.listing(only_unclaimed=only_unclaimed):
            yield item

    async def state(self, job: JobRef) -> JobState:
        return await self.inner.state(job)

    async def owner(self, job: JobRef) -> str | None:
        return await self.inner.owner(job)

    async def job_count(self) -> int:
        return await self.inner.job_count()

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        async for item in self.inner.trashed():
            yield item

    async def claim(self, job: JobRef, owner: str) -> Claim:
        return await self.inner.claim(job, owner)

    async def claim_next(self, owner: str, *, names: Collection[str] | None = None) -> Claim | None:
        return await self.inner.claim_next(owner, names=names)

    async def watch_claim(self, claim: Claim) -> str:
        return await self.inner.watch_claim(claim)

    async def consume(self, claim: Claim, result: Any = None) -> None:
        await self.inner.consume(claim, result)

    async def abandon(self, claim: Claim, *, retry_after: float | None = None,
                      error: LastError | None = None) -> None:
        await self.inner.abandon(claim, retry_after=retry_after, error=error)

    async def trash(self, claim: Claim, reason: str, *, error: LastError | None = None) -> None:
        await self.inner.trash(claim, reason, error=error)

    async def cancel(self, job: JobRef, reason: str) -> None:
        await self.inner.cancel(job, reason)

    async def report_progress(self, claim: Claim, fraction: float, note: str = "") -> None:
        await self.inner.report_progress(claim, fraction, note)

    async def purge(self, *, older_than: float = 0.0) -> int:
        return await self.inner.purge(older_than=older_than)

    async def requeue(self, job: JobRef, *, reset_attempts: bool = False) -> Job:
        return await self.inner.requeue(job, reset_attempts=reset_attempts)

    async def wait(self, *, names: Collection[str] | None = None) -> list[Job]:
        return await self.inner.wait(names=names)

    async def wait_for_completion(self, job: JobRef) -> Outcome:
        return await self.inner.wait_for_completion(job)

    def events(self, maxlen: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        return self.inner.events(maxlen)

    async def register_entity(self, name: str, metadata: Mapping[str, Any] | None = None) -> None:
        await self.inner.register_entity(name, metadata)

    async def unregister_entity(self, name: str) -> None:
        await self.inner.unregister_entity(name)

    async def entities(self) -> list[Entity]:
        return await self.inner.entities()
