"""``post_many``'s batch front (:mod:`jobboard.board.bulkfront`): the bytes ``encode_posting`` makes, every check
``post`` makes, plain and general postings mixed in order; the faster tokens and the twin constructor."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
import uuid
from typing import Any

import pytest

from jobboard import NewJob, open_board
from jobboard.board.bulkfront import BulkFront
from jobboard.board.codec import decode_posting, encode_posting, new_token, twin_constructor
from jobboard.errors import InvalidJob
from jobboard.job import Job, Priority

PLAIN = [
    NewJob("cycle", {"n": 1}), NewJob("cycle"), NewJob("résumé ✓", {"url": "a.png", "n": -5, "f": 1.5, "b": b"x"}),
    NewJob("cycle", {"deep": {"a": [1, [2, 3]], 7: None}, "big": 2**63}, priority=Priority.HIGH, keep_result=True),
    NewJob("n" * 200, {"jobboard.timeout": 2.5, "s": "x" * 40}, priority=Priority.VERY_LOW),
]


@pytest.mark.parametrize("max_attempts", [None, 3])
def test_a_plain_posting_is_encoded_as_encode_posting_encodes_it(max_attempts: int | None) -> None:
    front = BulkFront(1700000000.125, max_attempts, 1 << 20)
    for job in PLAIN:
        prepared = front.prepare(job, None)
        assert prepared is not None
        assert prepared.raw == encode_posting(prepared.posting)
        assert decode_posting(prepared.raw) == prepared.posting
        posting = prepared.posting
        assert (posting.name, posting.details, posting.priority, posting.keep_result, posting.max_attempts) == (
            job.name, dict(job.details or {}), job.priority, job.keep_result, max_attempts)
        assert (posting.created_at, posting.depends_on, posting.attempts, posting.not_before, posting.results) == (
            1700000000.125, (), 0, None, {})
        assert posting.details is not job.details  # a copy: the caller's dict may change after the post


@pytest.mark.parametrize("job", [
    NewJob("a", priority=1), NewJob("a", priority="high"), NewJob("a", keep_result=1),  # type: ignore[arg-type]
    NewJob("a", depends_on=("job-1",)), NewJob("a", max_attempts=2), NewJob("a", key="k"), NewJob("a", delay=1.0),
    NewJob("a", not_before=5.0), NewJob("a", result_ttl=1.0), NewJob("a", trash_ttl=1.0), NewJob("a", group="g"),
    NewJob(3),  # type: ignore[arg-type]
])
def test_anything_else_is_left_to_the_general_way(job: NewJob) -> None:
    assert BulkFront(1.0, None, 1 << 20).prepare(job, None) is None
    assert BulkFront(1.0, 0, 1 << 20).prepare(NewJob("a"), None) is None  # a bad default: refused there


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 20))


@pytest.mark.parametrize(("job", "message"), [
    (NewJob(""), "jobs[1]: job name must be a non-empty string"),
    (NewJob("a\nb"), "jobs[1]: job name 'a\\nb'... must be printable"),
    (NewJob("a", {"when": object()}), "jobs[1]: job 'a': details['when'] has a value of type object"),
    (NewJob("a", {1: 2}), "jobs[1]: job 'a': details key 1 is not a string"),  # type: ignore[dict-item]
    (NewJob("a", ["x"]), "jobs[1]: job 'a': details must be a mapping"),  # type: ignore[arg-type]
    (NewJob("a", {"n": 2**64}), "jobs[1]: job 'a': details['n'] is an integer out of 64-bit range"),
    (NewJob("a", {"jobboard.timeout": 0}), "jobs[1]: job 'a': details['jobboard.timeout'] must be a positive"),
    (NewJob("a", {"s": "x" * 300}), "over this board's limit of 200 bytes (max_posting_bytes)"),
])
def test_a_bad_plain_posting_is_refused_naming_it_and_nothing_is_written(job: NewJob, message: str) -> None:
    async def scenario() -> None:
        async with open_board(f"memory://bulk-{uuid.uuid4().hex[:8]}?max_posting_bytes=200") as board:
            with pytest.raises(InvalidJob) as refused:
                await board.post_many([NewJob("ok", {"n": 1}), job])
            assert message in str(refused.value)
            assert await board.job_count() == 0
    run(scenario())


def test_plain_and_general_postings_come_back_in_order_with_their_fields() -> None:
    async def scenario() -> None:
        async with open_board(f"memory://bulk-{uuid.uuid4().hex[:8]}?max_attempts=4") as board:
            batch = [NewJob("a", {"n": 1}), NewJob("b", priority="high", key="k"), NewJob("a", {"n": 2}),
                     NewJob("c", group="g", keep_result=True), NewJob("a", priority=Priority.LOW)]
            jobs = await board.post_many(batch)
            assert [(job.name, job.priority, job.key, job.group, job.max_attempts) for job in jobs] == [
                ("a", Priority.NORMAL, None, None, 4), ("b", Priority.HIGH, "k", None, 4),
                ("a", Priority.NORMAL, None, None, 4), ("c", Priority.NORMAL, None, "g", 4),
                ("a", Priority.LOW, None, None, 4)]
            assert [job.details for job in jobs] == [{"n": 1}, {}, {"n": 2}, {}, {}]
            assert [await board.get(job) for job in jobs] == jobs
            assert len({job.created_at for job in jobs}) == 1  # one clock reading per batch
    run(scenario())


def test_tokens_are_distinct_version_4_uuids() -> None:
    tokens = [new_token() for _ in range(1000)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        parsed = uuid.UUID(hex=token)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, token)


def test_the_twin_constructor_makes_genuine_frozen_instances() -> None:
    new_job = twin_constructor(Job)
    values = [f"v{index}" for index in range(len(dataclasses.fields(Job)))]
    made = new_job(*values)
    assert type(made) is Job and made == Job(*values)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "other"  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError):
        twin_constructor(NoSlots)


def test_newjob_built_by_its_faster_init_is_the_dataclass_it_was() -> None:
    """``jobboard.job.frozen_init``: a twin class's plain stores, then the class swapped back."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Reference:  # what NewJob's own dataclass __init__ made
        name: str
        details: Any = None
        priority: Any = Priority.NORMAL
        depends_on: Any = ()
        max_attempts: Any = None
        keep_result: bool = False
        key: Any = None
        delay: Any = None
        not_before: Any = None
        result_ttl: Any = None
        trash_ttl: Any = None
        group: Any = None

    made = NewJob("a", {"n": 1}, "high", ("1",), 3, True, "k", 1.5, None, 2.0, 3.0, "g")
    assert type(made) is NewJob
    assert dataclasses.astuple(made) == dataclasses.astuple(Reference("a", {"n": 1}, "high", ("1",), 3, True, "k", 1.5,
                                                                      None, 2.0, 3.0, "g"))
    assert NewJob("a") == NewJob(name="a", details=None) and hash(NewJob("a")) == hash(NewJob("a"))
    assert dataclasses.astuple(NewJob("b", keep_result=True)) == dataclasses.astuple(Reference("b", keep_result=True))
    assert dataclasses.replace(made, name="b").name == "b" and copy.copy(made) == made
    assert pickle.loads(pickle.dumps(made)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        NewJob()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        NewJob("a", nope=1)  # type: ignore[call-arg]

    class Sub(NewJob):
        pass

    sub = Sub("s", priority="low")
    assert type(sub) is Sub and (sub.name, sub.priority, sub.group) == ("s", "low", None)


def test_plain_postings_carry_the_current_trace_context() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra (and opentelemetry-sdk) is not installed")
    from opentelemetry.sdk.trace import TracerProvider

    async def scenario() -> None:
        async with open_board(f"memory://bulk-{uuid.uuid4().hex[:8]}") as board:
            with TracerProvider().get_tracer("test").start_as_current_span("request") as span:
                jobs = await board.post_many([NewJob("a", {"n": 1}), NewJob("a", {"n": 2})])
            untraced = await board.post_many([NewJob("a", {"n": 3})])
            trace_id = f"{span.get_span_context().trace_id:032x}"
            assert all(trace_id in (job.trace_context or {}).get("traceparent", "") for job in jobs)
            assert [(await board.get(job)).trace_context for job in jobs] == [job.trace_context for job in jobs]
            assert untraced[0].trace_context is None
    run(scenario())
