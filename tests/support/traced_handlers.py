"""Handlers for ``jobboard worker --trace`` tests: the module sets up the OpenTelemetry SDK, as an
application's handlers module would, exporting each finished span as one JSON line to the file
named by ``$JOBBOARD_TEST_SPANS``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from jobboard.worker.handlers import Handlers, JobContext


class LinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            out.writelines(json.dumps({"name": span.name, "trace_id": span.context.trace_id,
                                      "span_id": span.context.span_id,
                                      "parent": span.parent.span_id if span.parent else None}) + "\n" for span in spans)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(LinesExporter(os.environ["JOBBOARD_TEST_SPANS"])))
trace.set_tracer_provider(provider)

handlers = Handlers()


@handlers.register("echo")
async def echo(ctx: JobContext) -> dict[str, object]:
    return dict(ctx.details)
