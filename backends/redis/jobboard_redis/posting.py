"""Posting: one script call per job, exactly once (the posting's token is the call's nonce)."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jobboard.board.codec import Posting
from jobboard.board.gathering import gather_all
from jobboard.errors import BackendUnavailable, DependencyMissing, UnknownOutcome
from jobboard.job import Job
from jobboard_redis.failures import RetryExhausted
from jobboard_redis.records import job_of, sequence_of, text

Call = Callable[..., Awaitable[tuple[str, list[Any]]]]


BATCH = 100
"""Posts per script call in ``post_many`` (the server runs nothing else during a call)."""


def arguments(posting: Posting, raw: bytes) -> list[Any]:
    maxa = "" if posting.max_attempts is None else str(posting.max_attempts)
    return [posting.priority.rank, posting.name, raw, maxa, "1" if posting.keep_result else "0",
            posting.key or "", _delay_ms(posting), ttl_ms(posting.result_ttl), ttl_ms(posting.trash_ttl),
            posting.group or "", *posting.depends_on]


def _delay_ms(posting: Posting) -> int:
    """A delayed post's delay in whole milliseconds (rounded up), counted by the server from its clock."""
    if posting.not_before is None:
        return 0
    return max(0, math.ceil((posting.not_before - time.time()) * 1000))


def ttl_ms(ttl: float | None) -> str:
    """A job's own TTL for the scripts: milliseconds, or ``""`` for the board's."""
    return "" if ttl is None else str(round(ttl * 1000))


def job_from_reply(posting: Posting, status: str, data: list[Any]) -> Job:
    if status == "nodep":
        raise DependencyMissing.of(posting.name, text(data[0]))
    if status == "keyed":
        return job_of(text(data[0]), data[1], data[2], data[3], data[4])
    job_id = text(data[0])
    return posting.to_job(job_id, sequence_of(job_id))


def _not_written(what: str, error: RetryExhausted) -> BackendUnavailable:
    """A post none of whose attempts was ever sent: certainly not written (retrying is safe)."""
    return BackendUnavailable(f"{what}: nothing was sent, certainly not written ({error}); try again")


async def post_batch(call: Call, prepared: Sequence[tuple[Posting, bytes]], nonce_ms: int) -> list[Job]:
    """Write checked postings, :data:`BATCH` per script call; each post is atomic and exactly once
    on its own (its token is its nonce), the batch is not: a missing dependency stops it there
    (the jobs before it are posted). Without dependencies nothing can stop a batch, and its
    calls go out together (the server works on one while the next is encoded and sent).

    :raises InvalidJob, UnknownOutcome, BackendUnavailable: as :func:`post_prepared`.
    """
    chunks = [prepared[start:start + BATCH] for start in range(0, len(prepared), BATCH)]
    unkeyed = any(posting.key is None for posting, _ in prepared)
    if len(chunks) > 1 and not any(posting.depends_on for posting, _ in prepared):
        parts = await gather_all(*(_post_chunk(call, chunk, nonce_ms, alone=False, unkeyed=unkeyed)
                                   for chunk in chunks))
        return [job for part in parts for job in part]
    jobs: list[Job] = []
    for chunk in chunks:
        jobs += await _post_chunk(call, chunk, nonce_ms, alone=len(chunks) == 1, unkeyed=unkeyed, before=jobs)
    return jobs


async def _post_chunk(call: Call, chunk: Sequence[tuple[Posting, bytes]], nonce_ms: int, *, alone: bool,
                      unkeyed: bool, before: Sequence[Job] = ()) -> list[Job]:
    """One call of a batch (``alone``: the batch's only call; ``unkeyed``: the batch has a posting
    without a key; ``before``: the batch's jobs posted by the calls before it).

    :raises UnknownOutcome: Redis stayed unreachable, and an unkeyed posting of the batch may have
        been written (a call never sent tells nothing of the batch's other calls).
    :raises BackendUnavailable: the same, every posting keyed (post the batch again), or the
        batch's only call was never sent (certainly not written).
    """
    flat: list[Any] = []
    for posting, raw in chunk:
        args = arguments(posting, raw)
        flat += [len(args) + 1, f"{posting.token}:{nonce_ms}", *args]
    try:
        status, replies = await call("post_many", flat[1], *flat)  # the call's nonce: a resend is marked
    except RetryExhausted as error:
        if alone and not error.maybe_applied:
            raise _not_written("post_many", error) from error
        if unkeyed:
            raise UnknownOutcome(f"post_many: Redis was unreachable and whether the jobs were written "
                                 f"cannot be told ({error}); post with keys to retry safely") from error
        raise BackendUnavailable(f"post_many: Redis was unreachable part way, some jobs may have been written "
                                 f"({error}); posting the batch again with its keys is safe") from error
    if status == "range":  # posted at once: ids first, first + step, ... (step: 1 but on a spread board)
        first, step = int(replies[0]), int(replies[2]) if len(replies) > 2 else 1
        ids = [first + index * step for index in range(len(chunk))]
        return [posting.to_job(str(id_), id_) for id_, (posting, _) in zip(ids, chunk, strict=True)]
    jobs: list[Job] = []
    for (posting, _), (status, data) in zip(chunk, replies, strict=False):
        try:
            jobs.append(job_from_reply(posting, text(status), list(data)))
        except DependencyMissing as error:  # the server stopped the call there
            raise error.in_batch(len(before) + len(jobs), [*before, *jobs]) from None
    return jobs


async def post_prepared(call: Call, posting: Posting, raw: bytes, nonce_ms: int) -> Job:
    """Write one checked posting with ``call`` (the board's script call).

    :raises InvalidJob: a dependency is not on the board (nothing written).
    :raises UnknownOutcome: without a key, Redis stayed unreachable for the retry window.
    :raises BackendUnavailable: with a key, the same (posting again with the key is safe).
    """
    try:
        status, data = await call("post", f"{posting.token}:{nonce_ms}", *arguments(posting, raw))
    except RetryExhausted as error:
        if not error.maybe_applied:
            raise _not_written(f"post of {posting.name!r}", error) from error
        if posting.key is not None:
            raise
        raise UnknownOutcome(f"post of {posting.name!r}: Redis was unreachable and whether the job was "
                             f"written cannot be told ({error}); post with a key to retry safely") from error
    return job_from_reply(posting, status, data)
