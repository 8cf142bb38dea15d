"""Reads of one job's standing, each one round trip (no script: nothing is changed)."""

from __future__ import annotations

from jobboard.codec import decode_value
from jobboard.job import JobState, Outcome
from jobboard_redis.client import RedisClient
from jobboard_redis.records import text

STATES = {b"c": JobState.CLAIMED, b"w": JobState.WAITING}


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
