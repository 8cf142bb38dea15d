"""Trace context carried in postings, from the producer to the worker that runs the job.

When a job is posted while an OpenTelemetry span is current, the posting gets
the context in its optional ``trace`` field (``{"traceparent": ...}``, as the
global propagator writes it: W3C Trace Context by default), and the job shows it
as :attr:`~jobboard.job.Job.trace_context`. The field is not in the job's
details, so handlers never see it; postings without it (made outside a trace,
or by an older version) decode as before, and older versions ignore it.

Nothing here imports OpenTelemetry: a program that never imported
``opentelemetry.trace`` (:data:`OPENTELEMETRY_TRACE`) cannot have a current span, so the board
calls in here only once that module is loaded; until then a post costs one dictionary look-up
and postings stay as they were.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from jobboard.board.codec import Posting, encode_posting

OPENTELEMETRY_TRACE = "opentelemetry.trace"
"""The module whose presence in ``sys.modules`` means a span may be current."""
MAX_TRACE_BYTES = 1024
"""A carrier larger than this (a big baggage) keeps only its W3C Trace Context keys."""
W3C_KEYS = ("traceparent", "tracestate")


def current_trace_context() -> dict[str, str] | None:
    """The current span's context as the global propagator writes it, or ``None`` (no valid span)."""
    trace = sys.modules.get(OPENTELEMETRY_TRACE)
    if trace is None:
        return None
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    from opentelemetry import propagate  # imported already with opentelemetry.trace's package

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    carrier = {key: value for key, value in carrier.items() if isinstance(value, str)}
    if sum(len(key) + len(value) for key, value in carrier.items()) > MAX_TRACE_BYTES:
        carrier = {key: carrier[key] for key in W3C_KEYS if key in carrier}
    return carrier or None


def with_trace_context(posting: Posting, raw: bytes, limit: int) -> tuple[Posting, bytes]:
    """``posting`` (and its encoding) with the current trace context, if there is one.

    A posting that the context would push over the board's size ``limit`` is
    posted without it: tracing never makes a post fail.
    """
    carrier = current_trace_context()
    if carrier is None:
        return posting, raw
    traced = replace(posting, trace=carrier)
    traced_raw = encode_posting(traced)
    return (posting, raw) if len(traced_raw) > limit else (traced, traced_raw)
