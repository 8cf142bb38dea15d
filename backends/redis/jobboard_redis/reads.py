"""Reads of jobs and their standing, each one round trip (no script: nothing is changed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobboard.board.codec import MalformedEntry, decode_value
from jobboard.job import Claim, Job, JobState, ListedJob, Outcome, TrashedJob
from jobboard_redis.client import RedisClient
from jobboard_redis.keep import with_progress
from jobboard_redis.records import job_of, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard_redis.session import Session

STATES = {b"c": JobState.CLAIMED, b"w": JobState.WAITING}
CLAIMABLE = {b"u", b"d"}
LIST_FIELDS = ("p", "att", "nb", "st", "err", "owner", "gen", "pg", "pr")


def listed_of(job: Job, state: Any, owner: Any) -> ListedJob:
    """A listed job from its hash's ``st`` and ``owner`` fields."""
    listed_state = STATES.get(state, JobState.UNCLAIMED)
    return ListedJob(job, listed_state, text(owner) if listed_state is JobState.CLAIMED and owner else None)


async def read_listed(client: RedisClient, ids: Sequence[str], *,
                      only_unclaimed: bool = False) -> tuple[list[ListedJob], list[str]]:
    """The jobs among ``ids`` still on the board (one pipelined read), and the malformed ones."""
    rows = await client.pipeline([("HMGET", f"{client.prefix}job:{job}", *LIST_FIELDS) for job in ids],
                                 errors_in_place=True)
    found, malformed = [], []
    for job, row in zip(ids, rows, strict=True):
        if isinstance(row, list) and (row[3] is None or (only_unclaimed and row[3] not in CLAIMABLE)):
            continue
        try:
            if not isinstance(row, list):  # not a hash: a foreign key under the board's prefix
                raise MalformedEntry(str(row))
            listed = job_of(job, row[0], row[1], row[2], row[4])
            found.append(listed_of(with_progress(listed, row[6], row[7], row[8], row[3]), row[3], row[5]))
        except MalformedEntry:
            malformed.append(job)
    return found, malformed


async def job_state(client: RedisClient, job: str) -> JobState:
    """Where ``job`` stands: on the board (by its ``st`` field), in the trash, or complete."""
    state, trashed = await client.pipeline([("HGET", f"{client.prefix}job:{job}", "st"),
                                            ("EXISTS", f"{client.prefix}tr:{job}")])
    if state is not None:
        return STATES.get(state, JobState.UNCLAIMED)
    return JobState.TRASHED if trashed else JobState.COMPLETE


async def claim_status(client: RedisClient, job: str, generation: int) -> str | None:
    """Why the claim of ``job`` at ``generation`` is no longer current, or ``None`` while it is."""
    (state, stored), trashed = await client.pipeline([
        ("HMGET", f"{client.prefix}job:{job}", "st", "gen"), ("EXISTS", f"{client.prefix}tr:{job}")])
    if state is None:
        return "trashed" if trashed else "consumed"
    if int(stored or 0) != generation:
        return "claimed again"
    return None if state == b"c" else "released"


async def lost_claim(client: RedisClient, mine: tuple[int, str] | None, claim: Claim, session: Session) -> str | None:
    """Why ``claim`` is no longer current, or ``None``: "session expired" with no I/O when it was made under a
    session this board has lost since (``mine``: this board's record of it, generation and session), else
    :func:`claim_status`."""
    if mine is not None and mine[0] == claim.generation and (mine[1] != session.id or session.fenced):
        return "session expired"
    return await claim_status(client, claim.job.id, claim.generation)


async def completion(client: RedisClient, job: str) -> Outcome | None:
    """How ``job`` ended (its kept result or trash reason), or ``None`` while it is on the board."""
    state, reason, kept = await client.pipeline([
        ("HGET", f"{client.prefix}job:{job}", "st"), ("HGET", f"{client.prefix}tr:{job}", "reason"),
        ("GET", f"{client.prefix}kept:{job}")])
    if reason is not None:
        return Outcome(job, JobState.TRASHED, reason=text(reason))
    if state is None:
        return Outcome(job, JobState.COMPLETE, result=None if kept is None else decode_value(kept))
    return None


async def read_trashed(client: RedisClient, ids: Sequence[str]) -> list[tuple[str, TrashedJob | None]]:
    """The trash entries of ``ids`` (one pipelined read); ``None`` for a malformed one."""
    rows = await client.pipeline([("HMGET", f"{client.prefix}tr:{job}", "p", "att", "reason", "at", "err")
                                  for job in ids], errors_in_place=True)
    found: list[tuple[str, TrashedJob | None]] = []
    for job, row in zip(ids, rows, strict=True):
        try:
            if not isinstance(row, list):  # not a hash: a foreign key under the board's prefix
                raise MalformedEntry(str(row))
            raw, attempts, reason, at, error = row
            found.append((job, TrashedJob(job_of(job, raw, attempts, None, error), text(reason or b""),
                                          float(at or 0) / 1000)))
        except (MalformedEntry, ValueError):
            found.append((job, None))
    return found
