"""Posting: one script call per job, exactly once (the posting's token is the call's nonce)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jobboard.codec import Posting
from jobboard.errors import InvalidJob, UnknownOutcome
from jobboard.job import Job
from jobboard_redis.client import RetryExhausted
from jobboard_redis.records import job_of, sequence_of, text

Call = Callable[..., Awaitable[tuple[str, list[Any]]]]


async def post_prepared(call: Call, posting: Posting, raw: bytes) -> Job:
    """Write one checked posting with ``call`` (the board's script call).

    :raises InvalidJob: a dependency is not on the board (nothing written).
    :raises UnknownOutcome: without a key, Redis stayed unreachable for the retry window.
    :raises BackendUnavailable: with a key, the same (posting again with the key is safe).
    """
    name, key = posting.name, posting.key
    maxa = "" if posting.max_attempts is None else str(posting.max_attempts)
    try:
        status, data = await call(
            "post", posting.token, posting.priority.rank, name, raw, maxa, "1" if posting.keep_result else "0",
            key or "", *posting.depends_on)
    except RetryExhausted as error:
        if key is not None:
            raise
        raise UnknownOutcome(f"post of {name!r}: Redis was unreachable and whether the job was "
                             f"written cannot be told ({error}); post with a key to retry safely") from error
    if status == "nodep":
        raise InvalidJob(f"job {name!r}: dependency {text(data[0])} is not on the board")
    if status == "keyed":
        return job_of(text(data[0]), data[1], data[2], data[3])
    job_id = text(data[0])
    return posting.to_job(job_id, sequence_of(job_id))
