"""Stored job fields to :class:`~jobboard.job.Job` values, and script statuses to errors."""

from __future__ import annotations

import math
from typing import Any

from jobboard.backend import (
    MalformedEntry,
    Posting,
    decode_posting,
    decode_value,
    encode_value,
    last_error_from,
    last_error_record,
)
from jobboard.errors import AlreadyClaimed, ClaimLost, HeldBack, JobNotFound, NotClaimable, NotOwner
from jobboard.job import Entity, Job, LastError

JOB_FIELDS = ("p", "att", "nb", "st", "owner")


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def sequence_of(job_id: str) -> int:
    return int(job_id) if job_id.isdigit() else 0


def delay_ms(retry_after: float | None) -> int:
    """An abandon's ``retry_after`` (checked by the board) in whole milliseconds, rounded up."""
    return math.ceil((retry_after or 0) * 1000)


def encode_error(error: LastError | None) -> bytes:
    """The job hash's ``err`` field for ``error`` (empty: keep the stored one)."""
    if error is None:
        return b""
    return encode_value(last_error_record(error), what="last_error")


def error_of(raw: Any) -> LastError | None:
    """The job's last error from its ``err`` field (``None`` when absent or empty).

    :raises MalformedEntry: the field is not an encoded error.
    """
    if raw in (None, b"", ""):
        return None
    record = decode_value(raw) if isinstance(raw, bytes) else None
    try:
        if not isinstance(record, dict):
            raise TypeError("not a map")
        return last_error_from(record)
    except (KeyError, TypeError, ValueError, ArithmeticError) as error:
        raise MalformedEntry(f"bad stored last error: {error!r}") from error


def posting_of(raw: Any, attempts: Any, not_before: Any, last_error: Any = None) -> Posting:
    """The stored posting with the live attempts, delay (milliseconds on the server's clock) and
    last error (the job hash's ``err`` field, which wins over the posting's own).

    :raises MalformedEntry: ``raw`` is not a valid posting.
    """
    if not isinstance(raw, bytes):
        raise MalformedEntry("no posting")
    try:
        count = int(attempts or 0)
        delay = float(not_before) / 1000 if not_before not in (None, b"", "") else None
    except ValueError as error:
        raise MalformedEntry(f"bad stored field: {error}") from error
    posting = decode_posting(raw, (count, delay))
    return posting.failed(error_of(last_error)) if last_error else posting


def job_of(job_id: str, raw: Any, attempts: Any, not_before: Any, last_error: Any = None) -> Job:
    """:raises MalformedEntry: as :func:`posting_of`."""
    return posting_of(raw, attempts, not_before, last_error).to_job(job_id, sequence_of(job_id))


def dependency_results(posting: Posting, flat: list[Any]) -> tuple[Any, ...]:
    """The results delivered to a job (``HGETALL res:<id>``) in ``depends_on`` order."""
    if not posting.depends_on:
        return ()
    results = {text(flat[index]): decode_value(flat[index + 1]) for index in range(0, len(flat) - 1, 2)}
    return tuple(results.get(dep) for dep in posting.depends_on)


def settle_refused(status: str, job_id: str, owner: str) -> Exception:
    """The error for a settle script's refusal."""
    if status == "owner":
        return NotOwner(f"{owner} does not hold job {job_id}")
    return ClaimLost(f"the claim of job {job_id} is not current (settled, released or claimed again)")


def claim_refused(status: str, job_id: str, data: list[Any]) -> Exception:
    """The error for a claim script's refusal."""
    if status == "claimed":
        return AlreadyClaimed(f"job {job_id} is claimed by {text(data[0]) if data else 'another owner'}")
    if status == "waiting":
        return NotClaimable(f"job {job_id} is waiting for {text(data[0]) if data else 'its'} dependencies")
    if status == "delayed":
        return NotClaimable(f"job {job_id} is delayed (retry_after)")
    if status == "held":  # flow control (flow.lua): why, and for a rate the ms until its next permit
        why, due = text(data[0]), text(data[1])
        return HeldBack(f"job {job_id} is held back by flow control ({why})", why=why,
                        retry_after=int(due) / 1000 if due else None)
    if status == "exhausted":
        return JobNotFound(f"job {job_id} exceeded its max attempts and was moved to the trash")
    return JobNotFound(f"job {job_id} is not on the board")


def entities_of(flat: Any) -> list[Entity]:
    """Entities from ``HGETALL ents`` (a flat list or a mapping), by name; undecodable ones skipped."""
    pairs = dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) else dict(flat)
    found = []
    for name, raw in sorted(pairs.items()):
        try:
            found.append(Entity(text(name), decode_value(raw)))
        except MalformedEntry:
            continue
    return found


def jobs_of(ids: list[Any], rows: list[Any]) -> tuple[list[Job], list[str]]:
    """Jobs from ``peek`` rows (``p``, ``att``, ``nb``, ``err`` of each id), and the ids of malformed ones."""
    jobs, malformed = [], []
    for raw_id, row in zip(ids, rows, strict=True):
        job_id = text(raw_id)
        try:
            if len(row) != 4:
                raise MalformedEntry("not a job hash")
            jobs.append(job_of(job_id, *row))
        except MalformedEntry:
            malformed.append(job_id)
    return jobs, malformed
