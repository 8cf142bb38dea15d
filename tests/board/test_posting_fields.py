"""The posting front builds its records positionally (the hot path): every field must land where its name says,
through ``build_posting``, the codec's round trip, ``to_job`` and ``post_many`` (no backend's I/O involved)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest

from jobboard import NewJob, open_board
from jobboard.board.codec import Posting, build_posting, decode_posting, encode_posting
from jobboard.errors import InvalidJob
from jobboard.job import Job, LastError, Priority


def full_posting() -> Posting:
    """A posting whose every field holds a value no other field holds."""
    posting = build_posting(
        "resize", {"url": "a.png", "n": 3}, priority="high", depends_on=("job-0000000001", "job-0000000002"),
        max_attempts=5, keep_result=True, created_at=1700000000.25, key="k-1", result_ttl=11.0, trash_ttl=12.0,
        group="tenant-9", not_before=1700000100.5)
    return dataclasses.replace(posting, attempts=2, results={"job-0000000001": [1, 2]},
                               last_error=LastError("ValueError", "bad", "tb", 2, 1700000050.0),
                               trace={"traceparent": "00-ab-cd-01"})


def test_build_posting_puts_each_argument_in_its_field() -> None:
    posting = build_posting(
        "resize", {"url": "a.png"}, priority=1, depends_on=("job-0000000001",), max_attempts=5, keep_result=True,
        created_at=1700000000.25, key="k-1", result_ttl=11, trash_ttl=12, group="tenant-9", not_before=1700000100.5)
    assert (posting.name, posting.details, posting.priority, posting.created_at) == (
        "resize", {"url": "a.png"}, Priority.HIGH, 1700000000.25)
    assert (posting.depends_on, posting.max_attempts, posting.keep_result, posting.attempts) == (
        ("job-0000000001",), 5, True, 0)
    assert (posting.not_before, posting.results, posting.key, posting.last_error) == (1700000100.5, {}, "k-1", None)
    assert (posting.result_ttl, posting.trash_ttl, posting.trace, posting.group) == (11.0, 12.0, None, "tenant-9")
    assert len(posting.token) == 32


def test_every_field_survives_the_codec() -> None:
    posting = full_posting()
    assert decode_posting(encode_posting(posting)) == posting


def test_to_job_maps_every_field_by_name() -> None:
    posting = full_posting()
    job = posting.to_job("job-0000000009", 9)
    renamed = {"trace": "trace_context"}
    for each in dataclasses.fields(Posting):
        if each.name in ("token", "results"):
            continue  # not part of a job's view
        assert getattr(job, renamed.get(each.name, each.name)) == getattr(posting, each.name), each.name
    assert (job.id, job.sequence, job.progress) == ("job-0000000009", 9, None)
    assert {field.name for field in dataclasses.fields(Job)} == (
        {renamed.get(f.name, f.name) for f in dataclasses.fields(Posting)} - {"token", "results"}
        | {"id", "sequence", "progress"})


def test_details_are_copied_not_shared() -> None:
    details: dict[str, Any] = {"url": "a.png"}
    posting = build_posting("resize", details, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                            created_at=1.0)
    details["url"] = "b.png"
    assert posting.details == {"url": "a.png"}


@pytest.mark.parametrize(("details", "message"), [
    ({"n": 2**64}, "details['n'] is an integer out of 64-bit range"),
    ({"n": object()}, "details['n'] has a value of type object"),
    ({1: "x"}, "details key 1 is not a string"),
    ({"jobboard.timeout": 0}, "must be a positive number of seconds"),
    ({"deep": {(1, 2): "x"}}, "details['deep'] has a key of type tuple"),
])
def test_bad_details_name_the_field(details: dict[Any, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match="job 'resize': ") as raised:
        build_posting("resize", details, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                      created_at=1.0)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_post_many_reads_the_clock_once_and_applies_the_defaults_to_each() -> None:
    async def scenario() -> list[Job]:
        async with open_board(f"memory://fields-{uuid.uuid4().hex}?max_attempts=4") as board:
            return await board.post_many([NewJob("a", {"n": n}) for n in range(50)]
                                         + [NewJob("b", max_attempts=2, delay=60)])

    jobs = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert len({job.created_at for job in jobs}) == 1
    assert [job.max_attempts for job in jobs] == [4] * 50 + [2]
    assert jobs[-1].not_before == pytest.approx(jobs[-1].created_at + 60)
    assert [job.details for job in jobs[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_post_many_names_the_index_of_a_bad_posting_and_posts_nothing() -> None:
    async def scenario() -> tuple[str, int]:
        async with open_board(f"memory://fields-{uuid.uuid4().hex}") as board:
            with pytest.raises(InvalidJob) as raised:
                await board.post_many([NewJob("a"), NewJob("b", {"x": {1.5: "y"}})])
            return str(raised.value), await board.job_count()

    message, count = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert message.startswith("jobs[1]: job 'b': details['x'] has a key of type float") and count == 0
