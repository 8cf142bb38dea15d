"""jobboard[otel]: spans for posts, claims, settles and job runs, linked to the producer's trace.

Spans are captured with the SDK's in-memory exporter; the producer and the worker use two
boards (two connections on zookeeper:// and redis://), so the link crosses a real backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgpack
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (and opentelemetry-sdk) is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobboard import open_board
from jobboard.board.codec import build_posting, decode_posting, encode_posting
from jobboard.observe.tracing import TracedBoard, job_spans
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Fail, Handlers, JobContext
from tests.support.boards import BACKENDS, fresh_board_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "tracing")


def named(finished: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = [span for span in finished if span.name == name]
    assert len(found) == 1, [span.name for span in finished]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.mark.parametrize("board_url", ["memory", "zookeeper"], indirect=True)
async def test_the_worker_s_spans_join_the_producer_s_trace(
    board_url: str, spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    handlers = Handlers()

    @handlers.register("resize")
    async def resize(ctx: JobContext) -> str:
        with tracer.start_as_current_span("inside the handler"):
            return "done"

    @handlers.register("charge")
    async def charge(ctx: JobContext) -> None:
        raise Fail("card declined")

    with anyio.fail_after(30):
        async with open_board(board_url) as producer_inner, open_board(board_url) as worker_inner:
            producer = TracedBoard(producer_inner, tracer_provider=provider)
            with tracer.start_as_current_span("request") as request:
                resized = await producer.post("resize", {"image": "cat.png"})
                await producer.post("charge")
            worker_board = TracedBoard(worker_inner, tracer_provider=provider)
            await Worker(worker_board, handlers, WorkerConfig(burst=True),
                         middleware=[job_spans(provider)]).run()
            assert (await worker_inner.wait_for_completion(resized)).result is None
    finished = exporter.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    assert {span.context.trace_id for span in finished} == {trace_id}, "one trace, producer to worker"
    post = named(finished, "post resize")
    assert post.kind is SpanKind.PRODUCER and parent_of(post) == request.get_span_context().span_id
    assert post.attributes is not None and post.attributes["messaging.message.id"] == resized.id
    for name, kind in (("claim resize", SpanKind.CONSUMER), ("process resize", SpanKind.CONSUMER),
                       ("consume resize", SpanKind.CLIENT)):
        span = named(finished, name)
        assert span.kind is kind and parent_of(span) == post.context.span_id, name
        assert span.attributes is not None and span.attributes["messaging.message.id"] == resized.id
    process = named(finished, "process resize")
    assert process.status.status_code is not StatusCode.ERROR
    assert parent_of(named(finished, "inside the handler")) == process.context.span_id
    failed = named(finished, "process charge")
    assert failed.status.status_code is StatusCode.ERROR
    assert parent_of(named(finished, "trash charge")) == named(finished, "post charge").context.span_id


async def test_the_trace_context_survives_every_backend_s_encoding(
    board_url: str, spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Carried in the posting, not the details: through get, claim, an abandon (re-encoded) and the trash."""
    provider, _ = spans
    with anyio.fail_after(30):
        async with open_board(board_url) as board, open_board(board_url) as other:
            with provider.get_tracer("test").start_as_current_span("producer") as producer:
                job = await board.post("work", {"n": 1})
            traceparent = f"00-{producer.get_span_context().trace_id:032x}-"
            assert job.trace_context is not None and job.trace_context["traceparent"].startswith(traceparent)
            assert job.details == {"n": 1}
            assert (await other.get(job.id)).trace_context == job.trace_context
            claim = await other.claim(job.id, "w1")
            assert claim.job.trace_context == job.trace_context
            await other.abandon(claim, retry_after=None)
            again = await other.claim(job.id, "w1")
            assert again.attempt == 2 and again.job.trace_context == job.trace_context
            await other.trash(again, "done with it")
            trashed = [item.job async for item in board.trashed()]
            assert [item.trace_context for item in trashed] == [job.trace_context]
            untraced = await board.post("work")  # no current span: no context, the posting as before
            assert untraced.trace_context is None and (await other.get(untraced.id)).trace_context is None


def test_the_posting_format_stays_compatible() -> None:
    """The ``trace`` key is written only when there is a context; decoders read postings with or without it."""
    plain = build_posting("x", {"a": 1}, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                          created_at=1.0)
    record = msgpack.unpackb(encode_posting(plain))
    assert "trace" not in record  # what an older version writes, byte for byte the same
    assert decode_posting(encode_posting(plain)).trace is None
    record["trace"] = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    record["from_a_newer_version"] = [1, 2]  # unknown keys are ignored, as older versions ignore "trace"
    decoded = decode_posting(msgpack.packb(record))
    assert decoded.trace == record["trace"] and decoded.to_job("j", 1).trace_context == record["trace"]
    record["trace"] = "not a map"
    assert decode_posting(msgpack.packb(record)).trace is None  # a bad context is dropped, the job kept


async def test_a_context_that_would_overflow_the_posting_is_left_out(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    async with open_board("memory://tracing-limit?max_posting_bytes=300") as board:
        empty = build_posting("big", {"f": ""}, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                              created_at=1.0)
        filler = "x" * (300 - len(encode_posting(empty)) - 5)  # fits, with no room for a context
        with provider.get_tracer("test").start_as_current_span("producer"):
            job = await board.post("big", {"f": filler})
        assert job.trace_context is None and (await board.get(job)).details == {"f": filler}


async def test_jobboard_worker_trace_joins_the_producer_s_trace(
    zk_hosts: str, spans: tuple[TracerProvider, InMemorySpanExporter], tmp_path: Path,
) -> None:
    """``jobboard worker --trace`` (a real process, its SDK set up by the handlers' module)."""
    provider, _ = spans
    url = f"zookeeper://{zk_hosts}/tracing-cli/{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as inner:
            with provider.get_tracer("test").start_as_current_span("request") as request:
                job = await TracedBoard(inner, tracer_provider=provider).post("echo", {"n": 1})
    post_span = next(span for span in spans[1].get_finished_spans() if span.name == "post echo")
    output = tmp_path / "spans.jsonl"
    result = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "jobboard", "worker", url, "--handlers", "tests.support.traced_handlers:handlers",
         "--trace", "--burst"], capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "JOBBOARD_TEST_SPANS": str(output)}))
    assert result.returncode == 0, result.stderr
    worker_spans = {line["name"]: line for line in map(json.loads, output.read_text().splitlines())}
    assert set(worker_spans) == {"claim echo", "process echo", "consume echo"}, worker_spans
    for span in worker_spans.values():
        assert span["trace_id"] == request.get_span_context().trace_id
        assert span["parent"] == post_span.context.span_id
    assert job.trace_context is not None
