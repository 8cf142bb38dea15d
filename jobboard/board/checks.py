"""The board's input checks, one validator per kind of input: names, keys, groups, seconds (delays, due times,
lifetimes, ages), details msgpack can carry, sizes, owners and progress.

Each raises :class:`~jobboard.errors.InvalidJob` naming the job and what is wrong; used by
:mod:`jobboard.board.codec` when it builds a posting, and by the board (:mod:`jobboard.board.contract`)
for everything else. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobboard.errors import InvalidJob
from jobboard.job import INTERNAL_PREFIX, Progress, When

TIMEOUT_KEY = "jobboard.timeout"
"""A job's details may carry this key: seconds its handler may run (wins over the handler's); checked at post."""

MAX_NAME_LENGTH = 200


def seconds(value: object, what: str) -> float:
    """``value`` as seconds: the one check of "a finite number of seconds >= 0" (delays, ages, lifetimes).

    :raises InvalidJob: ``what must be a finite number of seconds >= 0, not <value>``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise InvalidJob(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def check_ttl(name: str, what: str, value: object) -> float | None:
    """:raises InvalidJob: unless ``value`` is ``None`` or a finite number of seconds >= 0."""
    return None if value is None else seconds(value, f"job {name!r}: {what}")


def check_retry_after(retry_after: object) -> float | None:
    """An abandon's ``retry_after``. :raises InvalidJob: unless ``None`` or finite seconds >= 0."""
    return None if retry_after is None else seconds(retry_after, "retry_after")


def check_age(older_than: object) -> float:
    """:raises InvalidJob: unless ``older_than`` is a finite number of seconds >= 0."""
    return seconds(older_than, "older_than")


def due_time(name: str, delay: float | None, not_before: When | None, now: float) -> float | None:
    """The wall-clock time (epoch seconds, like :attr:`~jobboard.job.Job.not_before`) before which a new
    job is not claimable, or ``None`` (claimable at once).

    ``delay`` counts seconds from ``now``; ``not_before`` is absolute: an aware
    ``datetime`` or epoch seconds. A naive ``datetime`` is refused (its time zone
    would be a guess). A due time already past, and ``delay=0``, mean "at once".

    :raises InvalidJob: both given, a negative or non-finite delay, a naive
        datetime, or a ``not_before`` of another type.
    """
    if delay is not None and not_before is not None:
        raise InvalidJob(f"job {name!r}: give delay or not_before, not both")
    if delay is not None:
        delay = seconds(delay, f"job {name!r}: delay")
        return now + delay if delay > 0 else None
    if not_before is None:
        return None
    if isinstance(not_before, datetime):
        if not_before.tzinfo is None or not_before.utcoffset() is None:
            raise InvalidJob(f"job {name!r}: not_before must be a timezone-aware datetime "
                             "(e.g. datetime.now(timezone.utc)), not a naive one")
        due = not_before.timestamp()
    elif isinstance(not_before, int | float) and not isinstance(not_before, bool) and math.isfinite(not_before):
        due = float(not_before)
    else:
        raise InvalidJob(f"job {name!r}: not_before must be an aware datetime or epoch seconds, not {not_before!r}")
    return due if due > now else None


def check_owner(owner: object) -> str:
    """An owner (of a claim) or an entity's name. :raises InvalidJob: unless a non-empty string."""
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidJob(f"owner must be a non-empty string, not {owner!r}")
    return owner


MAX_NOTE_LENGTH = 500


def check_progress(fraction: object, note: object, at: float) -> Progress:
    """The :class:`Progress` to store. :raises InvalidJob: ``fraction`` not in 0..1 or ``note`` not a string."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise InvalidJob(f"progress must be a number from 0 to 1, not {fraction!r}")
    if not isinstance(note, str):
        raise InvalidJob(f"a progress note must be a string, not {type(note).__name__}")
    return Progress(float(fraction), note[:MAX_NOTE_LENGTH], at)


MAX_KEY_LENGTH = 200
MAX_GROUP_LENGTH = 200


def check_group(group: object) -> str:
    """A job's group (flow control). :raises InvalidJob: unless a non-empty printable string of at most 200
    characters."""
    if not isinstance(group, str) or not group.strip() or not group.isprintable():
        raise InvalidJob(f"group must be a non-empty printable string, not {group!r}")
    if len(group) > MAX_GROUP_LENGTH:
        raise InvalidJob(f"group {group[:40]!r}... is {len(group)} characters, over the limit of {MAX_GROUP_LENGTH}")
    return group


def check_key(name: str, key: object) -> None:
    """:raises InvalidJob: unless ``key`` is ``None`` or a non-empty string of at most 200 characters."""
    if key is None:
        return
    if not isinstance(key, str) or not key:
        raise InvalidJob(f"job {name!r}: key must be a non-empty string or None, not {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidJob(f"job {name!r}: key is {len(key)} characters, over the limit of {MAX_KEY_LENGTH}")


def check_name(name: object) -> None:
    """:raises InvalidJob: unless ``name`` is a short printable non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidJob(f"job name must be a non-empty string, not {name!r}")
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise InvalidJob(f"job name {name[:40]!r}... must be printable and at most {MAX_NAME_LENGTH} chars")


def check_public_name(name: object) -> str:
    """A job name an application may post: :func:`check_name`'s, outside the library's own prefix (plan gates and
    records, schedules: posted by the library through ``JobBoard.post``, which takes them).

    :raises InvalidJob: as :func:`check_name`, or ``name`` starts with ``jobboard.``.
    """
    check_name(name)
    assert isinstance(name, str)
    if name.startswith(INTERNAL_PREFIX):
        raise InvalidJob(f"job name {name[:40]!r}: names starting with {INTERNAL_PREFIX!r} are reserved for the "
                         f"library's own jobs (plans, schedules)")
    return name


def check_details(name: str, details: Mapping[str, Any] | None) -> dict[str, Any]:
    """Copy ``details`` after checking msgpack can carry every value.

    :raises InvalidJob: naming the first offending key path.
    """
    if type(details) is dict and flat_details(details):  # the common case: no ABC check, no walk
        if TIMEOUT_KEY in details:
            _check_timeout(name, details[TIMEOUT_KEY])
        return details.copy()
    if details is None:
        return {}
    if not isinstance(details, Mapping):
        raise InvalidJob(f"job {name!r}: details must be a mapping, not {type(details).__name__}")
    for key in details:
        if not isinstance(key, str):
            raise InvalidJob(f"job {name!r}: details key {key!r} is not a string")
    problem = find_unencodable(details, "details")
    if problem:
        raise InvalidJob(f"job {name!r}: {problem}")
    if TIMEOUT_KEY in details:
        _check_timeout(name, details[TIMEOUT_KEY])
    return dict(details)


def _check_timeout(name: str, value: Any) -> None:
    """:raises InvalidJob: a ``jobboard.timeout`` that is not a positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise InvalidJob(f"job {name!r}: details[{TIMEOUT_KEY!r}] must be a positive number of seconds, "
                         f"not {value!r}")


_SCALARS = frozenset({str, float, bool, bytes, type(None)})


def flat_details(details: Mapping[Any, Any]) -> bool:
    """Whether ``details`` is flat: string keys, scalar values msgpack carries (the common case, checked fast;
    a copy of flat details is what decoding their encoding makes)."""
    for key, value in details.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind not in _SCALARS and (kind is not int or not -(2**63) <= value < 2**64):
            return False
    return True


def check_size(name: str, encoded: bytes, limit: int) -> None:
    """:raises InvalidJob: when an encoded posting exceeds the backend's ``limit``."""
    if len(encoded) > limit:
        raise InvalidJob(
            f"job {name!r}: posting is {len(encoded)} bytes, over this board's limit of "
            f"{limit} bytes (max_posting_bytes); store large payloads elsewhere and post a reference"
        )


def check_result_size(job_id: str, encoded: bytes, limit: int) -> None:
    """:raises InvalidJob: when an encoded result exceeds the backend's ``limit`` (nothing written)."""
    if len(encoded) > limit:
        raise InvalidJob(f"result of job {job_id} is {len(encoded)} bytes, over this board's limit of {limit} "
                         "bytes (max_posting_bytes); store it elsewhere and return a reference")


def find_unencodable(value: Any, path: str) -> str | None:
    """Describe the first value under ``path`` that msgpack cannot carry, or ``None``."""
    if isinstance(value, Mapping):
        return _find_in_mapping(value, path)
    if isinstance(value, (list, tuple)):
        found = (find_unencodable(item, f"{path}[{index}]") for index, item in enumerate(value))
        return next((problem for problem in found if problem), None)
    if value is None or isinstance(value, (bool, str, bytes, float)):
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**64 else f"{path} is an integer out of 64-bit range"
    return f"{path} has a value of type {type(value).__name__} that msgpack cannot encode"


def _find_in_mapping(value: Mapping[Any, Any], path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path} is a {type(value).__name__}; msgpack encodes only dict mappings"
    for key, item in value.items():
        if not isinstance(key, (str, int, bytes)):
            return f"{path} has a key of type {type(key).__name__}: {key!r}"
        found = find_unencodable(item, f"{path}[{key!r}]")
        if found:
            return found
    return None
