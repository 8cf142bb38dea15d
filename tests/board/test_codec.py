"""The posting codec, priorities and job ordering (no board involved)."""

from __future__ import annotations

import dataclasses
import types
import uuid
from typing import Any

import msgpack
import pytest

from jobboard.board.checks import check_size
from jobboard.board.codec import (
    MalformedEntry,
    Posting,
    build_posting,
    decode_posting,
    decode_value,
    encode_posting,
    encode_value,
)
from jobboard.board.limits import limit_from
from jobboard.errors import InvalidJob
from jobboard.job import Job, Priority

VALID_RECORD: dict[str, Any] = {
    "v": 1, "name": "resize", "details": {}, "priority": 0, "created_at": 1.5,
    "depends_on": [], "max_attempts": None, "keep_result": False, "token": "t",
    "attempts": 0, "not_before": None, "results": {},
}


def make(name: str = "resize", details: dict[str, Any] | None = None, **options: Any) -> Posting:
    arguments: dict[str, Any] = {
        "priority": Priority.NORMAL, "depends_on": (), "max_attempts": None,
        "keep_result": False, "created_at": 1700000000.25,
    }
    arguments.update(options)
    return build_posting(name, details, **arguments)


def packed(**changes: Any) -> bytes:
    """A stored record: the valid one with ``changes`` (an ``...`` value removes the key)."""
    record = {**VALID_RECORD, **changes}
    data: bytes = msgpack.packb({k: v for k, v in record.items() if v is not ...}, use_bin_type=True)
    return data


# -- round trip -------------------------------------------------------------


def test_round_trip_of_a_full_posting() -> None:
    details = {"image": "a.png", "sizes": [64, 128], "meta": {"raw": b"\x00\xff", "ok": True, "x": None}}
    posting = make(details=details, priority="high", depends_on=("job-1", "job-2"),
                   max_attempts=3, keep_result=True)
    posting = posting.claimed().delayed(1700000100.0).with_result("job-1", {"bytes": 10})
    decoded = decode_posting(encode_posting(posting))
    assert decoded == posting
    assert decoded.waiting_on == ("job-2",)
    assert decoded.dependency_results() == ({"bytes": 10}, None)


def test_round_trip_of_a_minimal_posting_and_its_job_view() -> None:
    posting = make()
    assert posting.token and make().token != posting.token
    job = decode_posting(encode_posting(posting)).to_job("job-7", 7)
    assert job == Job("job-7", "resize", {}, Priority.NORMAL, 7, 1700000000.25)


def test_claimed_counts_an_attempt_and_clears_the_delay() -> None:
    posting = make().delayed(5.0).claimed()
    assert (posting.attempts, posting.not_before) == (1, None)


# -- malformed entries ------------------------------------------------------


@pytest.mark.parametrize("data", [
    b"", None, b"\xc1", b"\x92\x01", b"not msgpack at all \xff\xfe",
    msgpack.packb([1, 2, 3]), msgpack.packb("v1"),
], ids=["empty", "none", "reserved-byte", "truncated", "garbage", "list", "string"])
def test_garbage_is_malformed(data: bytes | None) -> None:
    with pytest.raises(MalformedEntry):
        decode_posting(data)


@pytest.mark.parametrize("version", [0, 2, "1", None, ...], ids=["0", "2", "str", "none", "missing"])
def test_wrong_or_missing_version_is_malformed(version: object) -> None:
    with pytest.raises(MalformedEntry, match="version-1"):
        decode_posting(packed(v=version))


@pytest.mark.parametrize("field", ["name", "details", "priority", "created_at", "depends_on",
                                   "max_attempts", "keep_result", "token", "attempts", "not_before"])
def test_missing_field_is_malformed(field: str) -> None:
    with pytest.raises(MalformedEntry, match=field):
        decode_posting(packed(**{field: ...}))


@pytest.mark.parametrize("changes", [
    {"name": 5}, {"details": [1]}, {"priority": 9}, {"created_at": "soon"},
    {"depends_on": 5}, {"max_attempts": "many"}, {"attempts": None}, {"results": 5},
], ids=lambda changes: next(iter(changes)))
def test_bad_field_value_is_malformed(changes: dict[str, Any]) -> None:
    with pytest.raises(MalformedEntry, match="bad posting field"):
        decode_posting(packed(**changes))


def test_missing_results_defaults_to_none_delivered() -> None:
    assert decode_posting(packed(results=...)).results == {}


def test_decode_value_of_garbage_is_malformed() -> None:
    with pytest.raises(MalformedEntry, match="undecodable"):
        decode_value(b"\xc1")
    assert decode_value(encode_value({1: [b"x"]}, what="r")) == {1: [b"x"]}


# -- validation at post -----------------------------------------------------


@pytest.mark.parametrize(("details", "path"), [
    ({"when": object()}, "details['when']"),
    ({"a": {"b": [1, {2, 3}]}}, "details['a']['b'][1]"),
    ({"big": 2**64}, "details['big']"),
    ({"small": -(2**63) - 1}, "details['small']"),
    ({"nested": {(1, 2): "tuple key"}}, "details['nested']"),
])
def test_unencodable_details_name_the_path(details: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        make(details=details)
    assert path in str(caught.value) and "'resize'" in str(caught.value)


def test_flat_details_are_copied_and_keep_their_values() -> None:
    details = {"s": "x", "i": 2**64 - 1, "n": -(2**63), "f": 1.5, "b": True, "z": None, "raw": b"\x00"}
    posting = make(details=details)
    assert posting.details == details and posting.details is not details
    assert decode_posting(encode_posting(posting)).details == details


def test_tokens_are_distinct_version_4_uuids() -> None:
    tokens = {make().token for _ in range(200)}
    assert len(tokens) == 200
    assert all(uuid.UUID(token).version == 4 and uuid.UUID(token).hex == token for token in tokens)


def test_non_string_top_level_key_is_refused() -> None:
    with pytest.raises(InvalidJob, match="details key 1 is not a string"):
        make(details={1: "x"})  # type: ignore[dict-item]


def test_non_mapping_details_are_refused() -> None:
    with pytest.raises(InvalidJob, match="mapping"):
        make(details=[1, 2])  # type: ignore[arg-type]


def test_nested_non_dict_mapping_is_invalid_job_not_type_error() -> None:
    with pytest.raises(InvalidJob):
        encode_posting(make(details={"frozen": types.MappingProxyType({"a": 1})}))


def test_encode_value_names_what_it_encodes() -> None:
    with pytest.raises(InvalidJob, match=r"result of job-1\[0\] has a value of type object"):
        encode_value([object()], what="result of job-1")


@pytest.mark.parametrize(("name", "options", "message"), [
    ("", {}, "non-empty"),
    ("x" * 201, {}, "at most 200"),
    ("tab\there", {}, "printable"),
    ("x", {"priority": "urgent"}, "unknown priority"),
    ("x", {"max_attempts": 0}, "max_attempts"),
    ("x", {"depends_on": ("job-1", "job-1")}, "twice"),
    ("x", {"depends_on": ("",)}, "depends_on"),
])
def test_bad_post_arguments_are_invalid_job(name: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        make(name, **options)


def test_depends_on_accepts_jobs_and_ids() -> None:
    assert make(depends_on=(Job("job-1", "a"), "job-2")).depends_on == ("job-1", "job-2")


def test_size_check_names_the_limit() -> None:
    check_size("resize", b"x" * 100, 100)
    with pytest.raises(InvalidJob) as caught:
        check_size("resize", b"x" * 101, 100)
    assert "101 bytes" in str(caught.value) and "limit of 100 bytes" in str(caught.value)
    assert "max_posting_bytes" in str(caught.value)


# -- priorities and ordering ------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("high", Priority.HIGH), ("HIGH", Priority.HIGH), (" Very_High ", Priority.VERY_HIGH),
    ("very-low", Priority.VERY_LOW), (0, Priority.NORMAL), (-1, Priority.LOW),
    (2, Priority.VERY_HIGH), (Priority.LOW, Priority.LOW),
])
def test_priority_parse_accepts_names_and_ints(value: Priority | int | str, expected: Priority) -> None:
    assert Priority.parse(value) is expected


@pytest.mark.parametrize("value", ["urgent", "", "1", 3, -3])
def test_priority_parse_rejects_others_listing_valid_names(value: int | str) -> None:
    with pytest.raises(ValueError, match="unknown priority") as caught:
        Priority.parse(value)
    assert "very_low, low, normal, high, very_high" in str(caught.value)


def test_priority_rank_sorts_most_urgent_first() -> None:
    assert sorted(Priority, key=lambda p: p.rank) == list(reversed(Priority))


def test_job_sort_key_orders_by_priority_then_sequence() -> None:
    jobs = [
        Job("a", "n", priority=Priority.NORMAL, sequence=1),
        Job("b", "n", priority=Priority.HIGH, sequence=4),
        Job("c", "n", priority=Priority.VERY_LOW, sequence=0),
        Job("d", "n", priority=Priority.HIGH, sequence=2),
        Job("e", "n", priority=Priority.NORMAL, sequence=3),
    ]
    assert [job.id for job in sorted(jobs, key=Job.sort_key)] == ["d", "b", "a", "e", "c"]


def test_live_attempts_and_delay_replace_the_stored_ones_which_are_still_checked() -> None:
    raw = encode_posting(make())
    assert decode_posting(raw, (3, 12.5)) == make_like(decode_posting(raw), attempts=3, not_before=12.5)
    with pytest.raises(MalformedEntry):
        decode_posting(msgpack.packb({**VALID_RECORD, "attempts": "x"}), (1, None))


def make_like(posting: Posting, **changes: Any) -> Posting:
    return dataclasses.replace(posting, **changes)



@pytest.mark.parametrize("record", [{"group": "g", "concurrency": float("inf")},
                                    {"group": "g", "rate": [float("-inf"), 1.0]}])
def test_a_stored_limit_out_of_range_is_a_value_error_as_documented(record: dict[str, Any]) -> None:
    """A stored limit with an infinite count (no board writes one) raises what ``limit_from`` documents,
    ``ValueError``, which the backends turn into ``MalformedEntry``; an ``OverflowError`` got past them."""
    with pytest.raises(ValueError, match="out of range"):
        limit_from(record)


def test_a_posting_whose_last_error_overflows_is_malformed() -> None:
    """A stored posting whose last error's attempt is infinite is a ``MalformedEntry``, not an ``OverflowError``
    that got past every backend's handling of malformed entries (a claim made was lost to its read:
    tests/backends/redis/test_foreign_entries.py, tests/backends/postgresql/test_foreign_rows.py)."""
    record = msgpack.unpackb(encode_posting(make()), raw=False)
    record["last_error"] = {"type": "T", "message": "m", "attempt": float("inf")}
    with pytest.raises(MalformedEntry):
        decode_posting(msgpack.packb(record, use_bin_type=True))
