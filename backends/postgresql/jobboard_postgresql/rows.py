"""Rows to records: a job row's posting (immutable bytes) merged with its live columns.

A job's posting is written once, at the post. What changes is kept in columns beside it: attempts,
``not_before``, the last error and the current claim's progress (msgpack arrays), and the key (a
requeued job may lose its key to a newer job). Decoding never raises for a well-formed row;
a posting that is not one raises :class:`~jobboard.backend.MalformedEntry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from jobboard.backend import (
    Claim,
    Job,
    LastError,
    MalformedEntry,
    Posting,
    Progress,
    decode_posting,
    decode_value,
    encode_value,
)


def encode_error(error: LastError | None) -> bytes | None:
    if error is None:
        return None
    return encode_value([error.type, error.message, error.traceback, error.attempt, error.at], what="last error")


def decode_error(raw: bytes | None) -> LastError | None:
    if raw is None:
        return None
    kind, message, traceback, attempt, at = decode_value(raw)
    return LastError(str(kind), str(message), str(traceback), int(attempt), float(at))


def encode_progress(progress: Progress) -> bytes:
    return encode_value([progress.fraction, progress.note, progress.at], what="progress")


def decode_progress(raw: bytes | None) -> Progress | None:
    if raw is None:
        return None
    fraction, note, at = decode_value(raw)
    return Progress(float(fraction), str(note), float(at))


def job_of(job_id: int, raw: bytes, attempts: int, not_before: float | None, last_error: bytes | None = None,
           progress: bytes | None = None, key: Any = False) -> Job:
    """The job of one row. :raises MalformedEntry: the posting is not one (or a live column is bad)."""
    posting = decode_posting(raw, (attempts, not_before))
    job = posting.to_job(str(job_id), job_id)
    if last_error is None and progress is None and (key is False or key == posting.key):
        return job
    try:
        return replace(job, last_error=decode_error(last_error) or job.last_error, progress=decode_progress(progress),
                       key=posting.key if key is False else key)
    except (TypeError, ValueError, ArithmeticError) as error:
        raise MalformedEntry(f"bad live column: {error}") from error


def row_job(row: Any) -> Job:
    """A job from a row with ``id, posting, attempts, not_before, last_error, progress, key``."""
    return job_of(row["id"], row["posting"], row["attempts"], row["not_before"], row["last_error"], row["progress"],
                  row["key"])


def claim_of(job_id: int, owner: str, row: Any) -> Claim:
    """The claim a claim function's row describes (``r_gen``, ``r_attempts``, ``r_posting``, ...)."""
    job = job_of(job_id, row["r_posting"], row["r_attempts"], None, row["r_last_error"], None, row["r_key"])
    return Claim(job, owner, row["r_gen"], dependency_results(job, row["r_parents"], row["r_results"]))


def dependency_results(job: Job, parents: Sequence[int] | None, results: Sequence[bytes] | None) -> tuple[Any, ...]:
    if not job.depends_on:
        return ()
    delivered = {str(parent): decode_value(body) for parent, body in zip(parents or (), results or (), strict=True)}
    return tuple(delivered.get(dep) for dep in job.depends_on)


def post_arguments(posting: Posting) -> tuple[Any, ...]:
    """A posting's columns, in ``jb.post``'s parameter order after the board (up to the raw posting).

    :raises ValueError: a dependency id that is not one of this backend's ids.
    """
    deps = sorted({int(dep) for dep in posting.depends_on}) if posting.depends_on else None
    return (posting.name, posting.priority.rank, posting.max_attempts, posting.not_before, posting.key,
            posting.token, posting.keep_result, posting.result_ttl, posting.trash_ttl, deps)
