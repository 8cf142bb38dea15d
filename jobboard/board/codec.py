"""The posting format: the one place that knows msgpack.

A posting is what a backend stores for a job. It is a msgpack map with a format
version ``"v": 1``; decoding anything else raises :class:`MalformedEntry`, which
backends turn into a skipped-and-reported entry, never a broken listing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, TypeVar, cast

import msgpack

from jobboard.board.checks import (
    check_details,
    check_group,
    check_key,
    check_name,
    check_ttl,
    find_unencodable,
)
from jobboard.errors import InvalidJob, JobBoardError
from jobboard.job import Job, LastError, Priority, Progress

FORMAT_VERSION = 1
_Made = TypeVar("_Made")


class MalformedEntry(JobBoardError):
    """Stored data is not a valid posting (written by another tool or version)."""


@dataclass(frozen=True, slots=True)
class Posting:
    """A job's stored fields; the board adds the id and sequence."""

    name: str
    details: Mapping[str, Any] = field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    created_at: float = 0.0
    depends_on: tuple[str, ...] = ()
    max_attempts: int | None = None
    keep_result: bool = False
    token: str = ""
    """Unique per post: lets a backend recognise its own write after a replay."""
    attempts: int = 0
    not_before: float | None = None
    results: Mapping[str, Any] = field(default_factory=dict)
    """Results delivered by consumed dependencies, by dependency id."""
    key: str | None = None
    """The idempotency key the job was posted with, if any."""
    last_error: LastError | None = None
    result_ttl: float | None = None
    trash_ttl: float | None = None
    trace: Mapping[str, str] | None = None
    """The producer's trace context (W3C ``traceparent``...), see :mod:`jobboard.board.propagation`."""
    group: str | None = None
    """The flow-control group (:mod:`jobboard.board.limits`); stored only when given."""

    @property
    def waiting_on(self) -> tuple[str, ...]:
        """Dependencies whose results have not been delivered yet."""
        return tuple(dep for dep in self.depends_on if dep not in self.results)

    def dependency_results(self) -> tuple[Any, ...]:
        return tuple(self.results.get(dep) for dep in self.depends_on)

    def with_result(self, dependency: str, result: Any) -> Posting:
        """The posting after ``dependency`` was consumed with ``result``."""
        return replace(self, results={**self.results, dependency: result})

    def to_job(self, job_id: str, sequence: int) -> Job:
        """The immutable :class:`Job` view of this posting. (Replaced below by the same made by :func:`twin_maker`.)"""
        return _new_job(job_id, self.name, self.details, self.priority, sequence, self.created_at, self.depends_on,
                        self.max_attempts, self.attempts, self.not_before, self.keep_result, self.key,
                        self.last_error, self.result_ttl, self.trash_ttl, None, self.trace, self.group)

    def claimed(self) -> Posting:
        """The posting after one more claim (attempt counted, delay cleared)."""
        return self.counted(self.attempts + 1, None)

    def delayed(self, not_before: float | None) -> Posting:
        """The posting made unclaimable until ``not_before`` (or claimable now: ``None``)."""
        return self.counted(self.attempts, not_before)

    def counted(self, attempts: int, not_before: float | None) -> Posting:
        """The posting with these ``attempts`` and ``not_before``: ``replace`` at half its cost (hot path)."""
        return _new_posting(self.name, self.details, self.priority, self.created_at, self.depends_on,
                            self.max_attempts, self.keep_result, self.token, attempts, not_before, self.results,
                            self.key, self.last_error, self.result_ttl, self.trash_ttl, self.trace, self.group)

    def reset_attempts(self) -> Posting:
        """The posting with its attempts counted from 0 again (``requeue``)."""
        return replace(self, attempts=0)

    def without_key(self) -> Posting:
        return replace(self, key=None)

    def failed(self, error: LastError | None) -> Posting:
        """The posting with ``error`` as its last error (unchanged for ``None``)."""
        return self if error is None else replace(self, last_error=error)




def twin_constructor(cls: type[_Made]) -> Callable[..., _Made]:
    """What :func:`~jobboard.job.positional_constructor` makes (every field positionally, in order; a genuine,
    frozen ``cls``) at a third of its cost: the fields are stored into a twin, a plain class with ``cls``'s
    slots (plain attribute stores), whose class then becomes ``cls`` (same layout: Python allows it).

    :raises TypeError: ``cls`` has a ``__post_init__``, or slots other than its fields in order.
    """
    names = [each.name for each in fields(cls)]  # type: ignore[arg-type]
    constructor: Callable[..., _Made] = twin_maker(cls, [f"a{index}" for index in range(len(names))],
                                                   {name: f"a{index}" for index, name in enumerate(names)})
    return constructor


def twin_maker(cls: type[Any], parameters: Sequence[str], values: Mapping[str, str]) -> Callable[..., Any]:
    """A function of ``parameters`` making a genuine ``cls`` whose fields are the Python expressions ``values``
    (of the parameters, or constants): stored into a twin of ``cls`` as :func:`twin_constructor` does, with no
    call of every field's value passed on (a ``Job`` of a posting: 18 arguments less).

    :raises TypeError: ``cls`` has a ``__post_init__``, slots other than its fields in order, or a field
        ``values`` leaves out.
    """
    names = [each.name for each in fields(cls)]
    if hasattr(cls, "__post_init__") or tuple(getattr(cls, "__slots__", ())) != tuple(names) or set(values) != set(names):
        raise TypeError(f"{cls.__name__} needs its fields as its slots, each given, and no __post_init__")
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": tuple(names)})
    scope: dict[str, Any] = {"new": object.__new__, "twin": twin, "cls": cls, "NO_RESULTS": NO_RESULTS}
    body = "".join(f"    made.{name} = {values[name]}\n" for name in names)
    exec(f"def make({', '.join(parameters)}):\n    made = new(twin)\n{body}    made.__class__ = cls\n    return made\n",  # noqa: S102
         scope)
    made: Callable[..., Any] = scope["make"]
    probe: Any = object.__new__(twin)
    probe.__class__ = cls  # a layout Python refuses to swap raises TypeError here, not per post
    made.__qualname__ = made.__name__ = f"new_{cls.__name__.lower()}"
    return made


NO_RESULTS: Mapping[str, Any] = MappingProxyType({})
"""The ``results`` of a posting no dependency delivered to (read-only: shared)."""
_new_posting = twin_constructor(Posting)
_new_job = twin_constructor(Job)
"""``Posting(...)`` and ``Job(...)`` with every field, in order, at a sixth of the cost (one of each per job
posted, a posting per read)."""
_JOB_OF_POSTING = {each.name: f"self.{each.name}" for each in fields(Job)} | {
    "id": "job_id", "sequence": "sequence", "progress": "None", "trace_context": "self.trace"}
setattr(Posting, "to_job", twin_maker(Job, ["self", "job_id", "sequence"], _JOB_OF_POSTING))  # noqa: B010
"""``Posting.to_job`` as one generated function: its slots read and stored straight into the job (a third less)."""
new_plain_posting: Callable[[str, dict[str, Any], Priority, float, int | None, bool, str], Posting] = twin_maker(
    Posting, ["name", "details", "priority", "created_at", "max_attempts", "keep_result", "token"],
    {"name": "name", "details": "details", "priority": "priority", "created_at": "created_at", "depends_on": "()",
     "max_attempts": "max_attempts", "keep_result": "keep_result", "token": "token", "attempts": "0",
     "not_before": "None", "results": "NO_RESULTS", "key": "None", "last_error": "None", "result_ttl": "None",
     "trash_ttl": "None", "trace": "None", "group": "None"})
"""A posting with no links, key, delay, lifetimes, group or trace, not claimed yet: ``post_many``'s plain one. Its
``results`` are one shared read-only empty mapping (a dict each was one more object per job for the collector)."""


def build_posting(
    name: str,
    details: Mapping[str, Any] | None,
    *,
    priority: Priority | int | str,
    depends_on: Sequence[str | Job],
    max_attempts: int | None,
    keep_result: bool,
    created_at: float,
    key: str | None = None,
    result_ttl: float | None = None,
    trash_ttl: float | None = None,
    group: str | None = None,
    not_before: float | None = None,
) -> Posting:
    """Validate a post's arguments and make its posting (``not_before``: its due time, checked by the caller).

    :raises InvalidJob: bad name, priority, max_attempts, dependency, details or group.
    """
    check_name(name)
    if type(priority) is Priority:
        parsed_priority = priority
    else:
        try:
            parsed_priority = Priority.parse(priority)
        except ValueError as error:
            raise InvalidJob(f"job {name!r}: {error}") from None
    if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):  # (a bool is no count)
        raise InvalidJob(f"job {name!r}: max_attempts must be a positive integer or None")
    dependency_ids = _dependency_ids(name, depends_on) if depends_on else ()
    checked = check_details(name, details)
    if key is not None:
        check_key(name, key)
    if result_ttl is not None:
        result_ttl = check_ttl(name, "result_ttl", result_ttl)
    if trash_ttl is not None:
        trash_ttl = check_ttl(name, "trash_ttl", trash_ttl)
    if group is not None:
        group = _checked_group(name, group)
    return _new_posting(name, checked, parsed_priority, created_at, dependency_ids, max_attempts, bool(keep_result),
                        new_token(), 0, not_before, {}, key, None, result_ttl, trash_ttl, None, group)


def _checked_group(name: str, group: object) -> str:
    try:
        return check_group(group)
    except InvalidJob as error:
        raise InvalidJob(f"job {name!r}: {error}") from None


def _dependency_ids(name: str, depends_on: Sequence[str | Job]) -> tuple[str, ...]:
    dependency_ids = tuple(dep.id if isinstance(dep, Job) else dep for dep in depends_on)
    if any(not isinstance(dep, str) or not dep for dep in dependency_ids):
        raise InvalidJob(f"job {name!r}: depends_on takes jobs or job ids")
    if len(set(dependency_ids)) != len(dependency_ids):
        raise InvalidJob(f"job {name!r}: depends_on names a job twice")
    return dependency_ids


_VERSION_4 = bytes(byte & 0x0F | 0x40 for byte in range(256))
_VARIANT_RFC_4122 = bytes(byte & 0x3F | 0x80 for byte in range(256))
"""Byte translations: a UUID's byte 6 takes version 4 in its high nibble, byte 8 the variant bits 10."""


_TOKENS: list[str] = []
"""Tokens made from ``os.urandom`` 256 at a time (one system call, not one per post); emptied in a
forked child, which must not hand out its parent's."""
os.register_at_fork(after_in_child=_TOKENS.clear)


def new_token() -> str:
    """A random version-4 UUID as 32 hex digits: ``uuid.uuid4().hex``, at a fifth of its cost."""
    try:
        return _TOKENS.pop()  # atomic under the GIL: no two threads get the same token
    except IndexError:
        raw = bytearray(os.urandom(16 * 256))
        raw[6::16], raw[8::16] = raw[6::16].translate(_VERSION_4), raw[8::16].translate(_VARIANT_RFC_4122)
        _TOKENS.extend(raw.hex(" ", 16).split(" "))  # 32 digits each, split in C (a slice each cost twice as much)
        return _TOKENS.pop()


def encode_value(value: Any, *, what: str) -> bytes:
    """Encode a result or other free value.

    :raises InvalidJob: naming ``what`` when msgpack cannot carry the value.
    """
    if value is None:
        return _NIL  # the usual result
    problem = find_unencodable(value, what)
    if problem:
        raise InvalidJob(problem)
    return cast(bytes, _packer().pack(value))


_NIL = b"\xc0"
"""msgpack's ``None``."""


def decode_value(data: bytes) -> Any:
    """Decode what :func:`encode_value` wrote.

    :raises MalformedEntry: when ``data`` is not msgpack.
    """
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise MalformedEntry(f"undecodable value: {error}") from error


def encode_posting(posting: Posting) -> bytes:
    """Encode a posting (format version :data:`FORMAT_VERSION`).

    Its details were checked when it was built; delivered results were checked
    when they were encoded for consume. So this is the hot path's plain packb.
    """
    details, results = posting.details, posting.results
    record = {
        "v": FORMAT_VERSION, "name": posting.name, "details": details if type(details) is dict else dict(details),
        "priority": int(posting.priority), "created_at": posting.created_at,
        "depends_on": list(posting.depends_on), "max_attempts": posting.max_attempts,
        "keep_result": posting.keep_result, "token": posting.token,
        "attempts": posting.attempts, "not_before": posting.not_before,
        "results": results if type(results) is dict else dict(results),
    }
    if posting.key is not None:
        record["key"] = posting.key
    if posting.result_ttl is not None:
        record["result_ttl"] = posting.result_ttl
    if posting.trash_ttl is not None:
        record["trash_ttl"] = posting.trash_ttl
    if posting.group is not None:
        record["group"] = posting.group  # optional: absent in postings without a group (and older ones)
    if posting.trace:
        record["trace"] = dict(posting.trace)  # optional: older readers ignore the key
    if posting.last_error is not None:
        record["last_error"] = last_error_record(posting.last_error)
    try:
        return cast(bytes, _packer().pack(record))
    except (TypeError, ValueError, OverflowError):
        return encode_value(record, what="posting")  # names the culprit


_PACKERS = threading.local()


def _packer() -> msgpack.Packer:
    """This thread's reusable packer (``packb`` makes a new one per call; a packer is not thread-safe)."""
    try:
        return cast(msgpack.Packer, _PACKERS.packer)
    except AttributeError:
        _PACKERS.packer = msgpack.Packer(use_bin_type=True)
        return cast(msgpack.Packer, _PACKERS.packer)


def decode_posting(data: bytes | None, live: tuple[int, float | None] | None = None) -> Posting:
    """Decode and validate a stored posting; ``live``: the attempts and ``not_before`` that replace
    the stored ones (for backends that keep them apart: no second posting built).

    :raises MalformedEntry: when ``data`` is not a version-1 posting.
    """
    if not data:
        raise MalformedEntry("empty posting")
    record = decode_value(data)
    version = record.get("v") if isinstance(record, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:
        raise MalformedEntry(f"not a version-{FORMAT_VERSION} posting")
    try:
        return _posting_from_record(record, live)
    except (KeyError, TypeError, ValueError, ArithmeticError) as error:
        raise MalformedEntry(f"bad posting field: {error!r}") from error


def _posting_from_record(record: dict[str, Any], live: tuple[int, float | None] | None) -> Posting:
    name, details = record["name"], record["details"]
    if not isinstance(name, str) or not isinstance(details, dict):
        raise TypeError("name must be a string and details a map")
    max_attempts, not_before, priority = record["max_attempts"], record["not_before"], record["priority"]
    attempts, not_before = int(record["attempts"]), None if not_before is None else float(not_before)
    if live is not None:
        attempts, not_before = live
    get = record.get
    results, key, last_error, trace, group = get("results"), get("key"), get("last_error"), get("trace"), get("group")
    depends_on, result_ttl, trash_ttl = record["depends_on"], get("result_ttl"), get("trash_ttl")
    return _new_posting(  # every field, in order (hot path: every read)
        name, details, _PRIORITIES[priority] if priority in _PRIORITIES else Priority(priority),
        float(record["created_at"]), tuple(map(str, depends_on)),
        None if max_attempts is None else int(max_attempts), bool(record["keep_result"]), str(record["token"]),
        attempts, not_before, dict(results) if results else {}, None if key is None else str(key),
        None if last_error is None else last_error_from(last_error),
        None if result_ttl is None else float(result_ttl), None if trash_ttl is None else float(trash_ttl),
        None if trace is None else _trace(trace), None if group is None else str(group),
    )


_PRIORITIES: dict[object, Priority] = {member.value: member for member in Priority}
"""Stored priority values and their members (``Priority(value)`` decides anything else)."""


def last_error_record(error: LastError) -> dict[str, Any]:
    """How a :class:`LastError` is stored, in a posting and by every backend that keeps it apart (one place)."""
    return {"type": error.type, "message": error.message, "traceback": error.traceback,
            "attempt": error.attempt, "at": error.at}


def last_error_from(record: Any) -> LastError | None:
    """The :class:`LastError` of a stored map (``None``: absent). :raises TypeError, KeyError, ValueError,
    OverflowError (an infinite attempt): not one."""
    if record is None:
        return None
    if not isinstance(record, dict):
        raise TypeError("last_error must be a map")
    return LastError(str(record["type"]), str(record["message"]), str(record.get("traceback", "")),
                     int(record.get("attempt", 0)), float(record.get("at", 0.0)))


def progress_record(progress: Progress) -> dict[str, Any]:
    """How a :class:`Progress` is stored by every backend (one place)."""
    return {"f": progress.fraction, "n": progress.note, "at": progress.at}


def progress_from(record: Any) -> Progress | None:
    """The :class:`Progress` of a stored map, or ``None`` when it is not one (progress is advisory)."""
    try:
        return Progress(float(record["f"]), str(record.get("n", "")), float(record.get("at", 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _trace(record: Any) -> dict[str, str] | None:
    """The optional ``trace`` map (absent in postings made outside a trace); a bad one is dropped."""
    if not isinstance(record, dict):
        return None
    return {key: value for key, value in record.items() if isinstance(key, str) and isinstance(value, str)} or None
