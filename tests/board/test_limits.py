"""Flow control's records and checks (jobboard/board/limits.py), the group in the stored posting, and the
interface's defaults: no I/O but a memory:// board."""

from __future__ import annotations

import msgpack
import pytest

from jobboard.backend import Backend
from jobboard.board.codec import build_posting, decode_posting, encode_posting
from jobboard.board.inputs import NewJob
from jobboard.board.limits import (
    GroupLimit,
    LimitSpec,
    Paused,
    Rate,
    limit_from,
    limit_record,
    limit_spec,
    parse_rate,
)
from jobboard.errors import InvalidJob, Unsupported


def posting(group: str | None) -> bytes:
    return encode_posting(build_posting("resize", {"n": 1}, priority=0, depends_on=(), max_attempts=None,
                                        keep_result=False, created_at=1.0, group=group))


def test_the_group_is_stored_in_the_posting_and_read_back() -> None:
    assert decode_posting(posting("tenant-42")).group == "tenant-42"
    assert decode_posting(posting("tenant-42")).to_job("j", 1).group == "tenant-42"
    assert decode_posting(posting(None)).group is None
    assert b"group" not in posting(None)  # absent, not nil: the stored format of a job without one is unchanged
    assert decode_posting(posting("g")).claimed().group == "g"  # counted() keeps every field


def test_an_older_posting_without_a_group_decodes_as_none() -> None:
    record = msgpack.unpackb(posting(None))
    assert "group" not in record
    assert decode_posting(msgpack.packb(record)).group is None
    assert NewJob("x").group is None


@pytest.mark.parametrize("bad", ["", "   ", "a\nb", "x" * 201, 42, b"g"])
def test_a_bad_group_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(InvalidJob) as refused:
        build_posting("resize", None, priority=0, depends_on=(), max_attempts=None, keep_result=False,
                      created_at=1.0, group=bad)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value) and "group" in str(refused.value)


def test_limit_spec_checks_each_argument() -> None:
    assert limit_spec("g", 2) == LimitSpec("g", 2)
    assert limit_spec("g", sequence=True) == LimitSpec("g", None, True)
    assert limit_spec("g", 0) == LimitSpec("g", 0)  # holds the group
    assert limit_spec("g", rate=(20, 1)) == LimitSpec("g", rate=Rate(20, 1.0))
    assert limit_spec("g", 1, True, "5/m") == LimitSpec("g", 1, True, Rate(5, 60.0))
    for args, words in [((), "give concurrency"), ((-1,), "concurrency"), ((True,), "concurrency"),
                        ((2, True), "one job at a time"), ((None, "yes"), "sequence"),
                        ((None, False, (0, 1.0)), "count"), ((None, False, (1, 0)), "period"),
                        ((None, False, (1, float("inf"))), "period"), ((None, False, (10_001, 1.0)), "count"),
                        ((None, False, [1]), "(count, period_seconds)")]:
        with pytest.raises(InvalidJob, match=words.replace("(", r"\(").replace(")", r"\)")) as refused:
            limit_spec("g", *args)
        assert "\n" not in str(refused.value)
    with pytest.raises(InvalidJob, match="group"):
        limit_spec("", 1)


def test_rates_are_read_from_text() -> None:
    assert parse_rate("20/s") == Rate(20, 1.0)
    assert parse_rate(" 100 / m ") == Rate(100, 60.0)
    assert parse_rate("5/h") == Rate(5, 3600.0)
    assert parse_rate("3/2.5s") == Rate(3, 2.5)
    assert parse_rate("7/min") == Rate(7, 60.0)
    assert [str(Rate(20, 1.0)), str(Rate(3, 2.5)), str(Rate(1, 60.0))] == ["20/s", "3/2.5s", "1/m"]
    for bad in ("abc", "20", "/s", "20/0s", "20/.s", "0/s", "-1/s", "20/d"):
        with pytest.raises(InvalidJob, match="rate") as refused:
            parse_rate(bad)
        assert "\n" not in str(refused.value)


def test_records_describe_and_round_trip() -> None:
    spec = LimitSpec("g", 2, False, Rate(20, 1.0))
    assert limit_from(msgpack.unpackb(msgpack.packb(limit_record(spec)))) == spec
    assert limit_from(limit_record(LimitSpec("h", sequence=True))) == LimitSpec("h", sequence=True)
    assert spec.describe() == "concurrency 2, rate 20/s"
    listed = GroupLimit.of(spec, running=1, waiting=3)
    assert (listed.group, listed.concurrency, listed.rate, listed.running, listed.waiting) == ("g", 2, Rate(20, 1.0), 1, 3)
    assert listed.spec == spec
    assert Paused(names=frozenset({"a"})).covers("a") and not Paused().covers("a") and Paused(board=True).covers("b")
    with pytest.raises(TypeError):
        limit_from([1])


class Bare(Backend):
    """A backend that implements none of the optional operations."""

    open = aclose = post = claim = claim_next = settle = watch_claim = cancel = get = None  # type: ignore[assignment]
    iterjobs = state = owner = job_count = trashed = wait = wait_for_completion = None  # type: ignore[assignment]
    register_entity = unregister_entity = entities = None  # type: ignore[assignment]


async def test_flow_control_is_unsupported_by_default() -> None:
    bare = Bare.__new__(Bare)
    assert not bare.flow_control
    for call in (bare.set_limit(LimitSpec("g", 1)), bare.clear_limit("g"), bare.limits(), bare.pause(None),
                 bare.resume("x"), bare.paused()):
        with pytest.raises(Unsupported, match="flow control"):
            await call
