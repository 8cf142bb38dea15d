"""OpenTelemetry spans for a board and its worker (``pip install 'jobboard[otel]'``).

* :class:`TracedBoard` wraps any board (its backend, in a :class:`TracedBackend`): a span per ``post`` / ``post_many``
  (kind PRODUCER: the posting carries its context, see :mod:`jobboard.board.propagation`),
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

from jobboard.backend import Backend, Prepared, Settle, SettleAction
from jobboard.board.contract import JobBoard
from jobboard.board.propagation import with_trace_context
from jobboard.job import Claim, Job
from jobboard.worker.handlers import JobContext, Middleware
from jobboard.wrappers.wrapped import WrappedBackend

__all__ = ["TracedBackend", "TracedBoard", "job_spans", "producer_context"]

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


class TracedBackend(WrappedBackend):
    """Forwards every call to ``inner``; posts, claims and settles make spans (see the module).
    Reads and progress reports (frequent and cheap) are forwarded without one."""

    def __init__(self, inner: Backend, *, tracer_provider: TracerProvider | None = None) -> None:
        super().__init__(inner)
        self.tracer = _tracer(tracer_provider)

    # -- traced ---------------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        name = prepared.posting.name
        with self.tracer.start_as_current_span(f"post {name}", kind=SpanKind.PRODUCER, attributes=_attributes(
                "post", "create", None, {"messaging.destination.name": name,
                                         "jobboard.key": prepared.posting.key})) as span:
            job = await self.inner.post(self._in_span(prepared))
            span.set_attribute("messaging.message.id", job.id)
            return job

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        with self.tracer.start_as_current_span("post_many", kind=SpanKind.PRODUCER, attributes=_attributes(
                "post_many", "create", None, {"messaging.batch.message_count": len(batch)})):
            return await self.inner.post_many([self._in_span(prepared) for prepared in batch])

    def _in_span(self, prepared: Prepared) -> Prepared:
        """``prepared`` carrying the current (post) span's context, which its consumer's spans follow."""
        posting, raw = with_trace_context(prepared.posting, prepared.raw, self.max_posting_bytes)
        return Prepared(posting, raw, prepared.connection)

    async def claim(self, job_id: str, owner: str) -> Claim:
        return await self._claiming(lambda: self.inner.claim(job_id, owner), owner)  # type: ignore[return-value]

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        return await self._claiming(lambda: self.inner.claim_next(owner, names), owner)

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        """One ``claim`` span per claim made (where the inner backend loops, each is its ``claim_next``'s)."""
        if not self.inner.claims_many_at_once:
            return await super().claim_many(owner, names, count)
        started = time.time_ns()
        try:
            claims = await self.inner.claim_many(owner, names, count)
        except Exception as error:
            self._failed_claim(error, owner, started)
            raise
        for claim in claims:
            self._claimed(claim, owner, started)
        return claims

    async def release(self, claim: Claim) -> None:
        if not self.inner.releases_uncounted:
            return await super().release(claim)  # an abandon: this wrapper's settle makes its span
        with self.tracer.start_as_current_span(
                f"release {claim.job.name}", context=producer_context(claim.job), kind=SpanKind.CLIENT,
                attributes=_attributes("release", "settle", claim.job, {
                    "jobboard.owner": claim.owner, "jobboard.generation": claim.generation})):
            await self.inner.release(claim)

    async def _claiming(self, call: Callable[[], Awaitable[Claim | None]], owner: str) -> Claim | None:
        """A claim's span is made once the claim is known, so that its parent can be the producer's."""
        started = time.time_ns()
        try:
            claim = await call()
        except Exception as error:
            self._failed_claim(error, owner, started)
            raise
        if claim is not None:
            self._claimed(claim, owner, started)
        return claim

    def _failed_claim(self, error: Exception, owner: str, started: int) -> None:
        span = self.tracer.start_span("claim", kind=SpanKind.CONSUMER, start_time=started,
                                      attributes=_attributes("claim", "receive", None, {"jobboard.owner": owner}))
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    def _claimed(self, claim: Claim, owner: str, started: int) -> None:
        self.tracer.start_span(
            f"claim {claim.job.name}", context=producer_context(claim.job), kind=SpanKind.CONSUMER,
            start_time=started, attributes=_attributes("claim", "receive", claim.job, {
                "jobboard.owner": owner, "jobboard.generation": claim.generation})).end()

    async def settle(self, claim: Claim, settle: Settle) -> None:
        extra: dict[str, Any] = {}
        if settle.action is SettleAction.ABANDON:
            extra["jobboard.retry_after"] = settle.retry_after
        elif settle.action is SettleAction.TRASH:
            extra["jobboard.reason"] = settle.reason[:200]
        operation = settle.action.value
        with self.tracer.start_as_current_span(
                f"{operation} {claim.job.name}", context=producer_context(claim.job), kind=SpanKind.CLIENT,
                attributes=_attributes(operation, "settle", claim.job, {
                    "jobboard.owner": claim.owner, "jobboard.generation": claim.generation, **extra})):
            await self.inner.settle(claim, settle)

    async def cancel(self, job_id: str, reason: str) -> None:
        with self.tracer.start_as_current_span("cancel", kind=SpanKind.CLIENT, attributes=_attributes(
                "cancel", "settle", None, {"messaging.message.id": job_id, "jobboard.reason": reason[:200]})):
            await self.inner.cancel(job_id, reason)


class TracedBoard(JobBoard):
    """A board over ``inner``'s backend wrapped in a :class:`TracedBackend` (they share the backend)."""

    backend: TracedBackend

    def __init__(self, inner: JobBoard, *, tracer_provider: TracerProvider | None = None) -> None:
        self.inner = inner
        super().__init__(TracedBackend(inner.backend, tracer_provider=tracer_provider))
