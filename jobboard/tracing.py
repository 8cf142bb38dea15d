"""OpenTelemetry spans for a board and its worker (``pip install 'jobboard[otel]'``).

* :class:`TracedBoard` wraps any board: a span per ``post`` / ``post_many``
  (kind PRODUCER: the posting carries its context, see :mod:`jobboard.propagation`),
  per claim (CONSUMER) and per settle: ``consume`` / ``abandon`` / ``trash`` /
  ``cancel`` (CLIENT). Reads, waits and watches are forwarded without spans.
* :func:`job_spans` is worker middleware: a span per job run, ``process <name>``.

Claim and settle spans and the job's span are children of the producer's span
when the job was posted inside one, so one trace shows post, claim, the run and
its settle, whichever process each happened in. A claim that finds nothing
makes no span (an idle worker polls).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, TracerProvider

from jobboard.board import JobBoard, JobRef, NewJob
from jobboard.handlers import JobContext, Middleware
from jobboard.job import (
    Claim,
    Job,
    LastError,
    Priority,
    When,
)
from jobboard.wrapped import WrappedBoard

__all__ = ["TracedBoard", "job_spans", "producer_context"]

SCOPE = "jobboard"


def _tracer(provider: TracerProvider | None) -> Tracer:
    return trace.get_tracer(SCOPE, tracer_provider=provider)


def producer_context(job: Job) -> Context | None:
    """The producer's context carried by ``job`` (``None``: posted outside a trace: the current one)."""
    return propagate.extract(job.trace_context) if job.trace_context else None


def _attributes(operation: str, kind: str, job: Job | None = None,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"messaging.system": SCOPE, "messaging.operation.name": operation,
                             "messaging.operation.type": kind}
    if job is not None:
        found.update({"messaging.destination.name": job.name, "messaging.message.id": job.id,
                      "jobboard.attempt": job.attempts})
    found.update({key: value for key, value in (extra or {}).items() if value is not None})
    return found


def job_spans(tracer_provider: TracerProvider | None = None) -> Middleware:
    """Worker middleware: a ``process <name>`` span (CONSUMER) around every job run.

    A handler that raises (``Retry`` and ``Fail`` included) ends it with an error
    status; the handler's own spans are its children.
    """
    async def traced(ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        attributes = _attributes("process", "process", ctx.job, {"jobboard.generation": ctx.generation,
                                                                  "jobboard.owner": ctx.claim.owner})
        with _tracer(tracer_provider).start_as_current_span(
                f"process {ctx.job.name}", context=producer_context(ctx.job), kind=SpanKind.CONSUMER,
                attributes=attributes):
            return await call_next()

    return traced


class TracedBoard(WrappedBoard):
    """Forwards every call to ``inner``; posts, claims and settles make spans (see the module).
    Reads and progress reports (frequent and cheap) are forwarded without one."""

    def __init__(self, inner: JobBoard, *, tracer_provider: TracerProvider | None = None) -> None:
        super().__init__(inner)
        self.tracer = _tracer(tracer_provider)

    # -- traced ---------------------------------------------------------------------

    async def post(self, name: str, details: Mapping[str, Any] | None = None, *,
                   priority: Priority | int | str = Priority.NORMAL, depends_on: Sequence[JobRef] = (),
                   max_attempts: int | None = None, keep_result: bool = False, key: str | None = None,
                   delay: float | None = None, not_before: When | None = None,
                   result_ttl: float | None = None, trash_ttl: float | None = None) -> Job:
        with self.tracer.start_as_current_span(f"post {name}", kind=SpanKind.PRODUCER, attributes=_attributes(
                "post", "create", None, {"messaging.destination.name": name, "jobboard.key": key})) as span:
            job = await self.inner.post(name, details, priority=priority, depends_on=depends_on,
                                        max_attempts=max_attempts, keep_result=keep_result, key=key,
                                        delay=delay, not_before=not_before,
                                        result_ttl=result_ttl, trash_ttl=trash_ttl)
            span.set_attribute("messaging.message.id", job.id)
            return job

    async def post_many(self, jobs: Sequence[NewJob]) -> list[Job]:
        with self.tracer.start_as_current_span("post_many", kind=SpanKind.PRODUCER, attributes=_attributes(
                "post_many", "create", None, {"messaging.batch.message_count": len(jobs)})):
            return await self.inner.post_many(jobs)

    async def claim(self, job: JobRef, owner: str) -> Claim:
        return await self._claiming(lambda: self.inner.claim(job, owner), owner)  # type: ignore[return-value]

    async def claim_next(self, owner: str, *, names: Collection[str] | None = None) -> Claim | None:
        return await self._claiming(lambda: self.inner.claim_next(owner, names=names), owner)

    async def _claiming(self, call: Callable[[], Awaitable[Claim | None]], owner: str) -> Claim | None:
        """A claim's span is made once the claim is known, so that its parent can be the producer's."""
        started = time.time_ns()
        try:
            claim = await call()
        except Exception as error:
            span = self.tracer.start_span("claim", kind=SpanKind.CONSUMER, start_time=started,
                                          attributes=_attributes("claim", "receive", None, {"jobboard.owner": owner}))
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()
            raise
        if claim is not None:
            self.tracer.start_span(
                f"claim {claim.job.name}", context=producer_context(claim.job), kind=SpanKind.CONSUMER,
                start_time=started, attributes=_attributes("claim", "receive", claim.job, {
                    "jobboard.owner": owner, "jobboard.generation": claim.generation})).end()
        return claim

    async def consume(self, claim: Claim, result: Any = None) -> None:
        with self._settling("consume", claim):
            await self.inner.consume(claim, result)

    async def abandon(self, claim: Claim, *, retry_after: float | None = None,
                      error: LastError | None = None) -> None:
        with self._settling("abandon", claim, {"jobboard.retry_after": retry_after}):
            await self.inner.abandon(claim, retry_after=retry_after, error=error)

    async def trash(self, claim: Claim, reason: str, *, error: LastError | None = None) -> None:
        with self._settling("trash", claim, {"jobboard.reason": reason[:200]}):
            await self.inner.trash(claim, reason, error=error)

    def _settling(self, operation: str, claim: Claim, extra: Mapping[str, Any] | None = None) -> Any:
        return self.tracer.start_as_current_span(
            f"{operation} {claim.job.name}", context=producer_context(claim.job), kind=SpanKind.CLIENT,
            attributes=_attributes(operation, "settle", claim.job, {
                "jobboard.owner": claim.owner, "jobboard.generation": claim.generation, **(extra or {})}))

    async def cancel(self, job: JobRef, reason: str) -> None:
        job_id = job if isinstance(job, str) else job.id
        with self.tracer.start_as_current_span("cancel", kind=SpanKind.CLIENT, attributes=_attributes(
                "cancel", "settle", None, {"messaging.message.id": job_id, "jobboard.reason": reason[:200]})):
            await self.inner.cancel(job, reason)

