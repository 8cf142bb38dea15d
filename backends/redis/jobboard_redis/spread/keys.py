"""Idempotency keys across the partitions of a spread board (``links.lua``, its end; docs/backends/redis.md).

Key K's record (``k:<K>``) in K's partition (``CRC16(K) mod K``) is the one arbiter of the key, wherever its
job lives. A keyed post bound for K's partition (no group, or a group of that partition) is one call there,
as on one slot: the record names one of its jobs, or (``far``) another partition's, which is then read there
(:meth:`Keys.resolve`: that job, or the record removed if nothing of it is left, and the post made again).
A keyed post bound for another partition G (its group's) takes three calls (:meth:`Keys.post_elsewhere`):

1. ``post_held`` in G: the job written held (waiting, never claimable while held), or the job G's own record
   of K names (a post of the same key and group before);
2. ``key_take`` in K's partition: the record names that job, unless it names another job still on the board,
   which wins (the held one is dropped, ``drop_held``, and the post answers the winner);
3. ``release`` in G: the job becomes claimable.

A job is released only once the record named it, and the record moves from a job only when nothing of that
job is left (a trash entry older than the key's retention counts as nothing): two jobs of one key are never
both claimable (with ``durability=strict``: else a failover of the key's shard losing the record's write can
let a later post of the key make a second job). A concurrent post of the same key answers the job the record names (held or not: it waits at
most for the sweep below), or wins the record and the other post drops its held job. A lost reply is resent
(every call is idempotent: ``post_held`` by its nonce). ``release`` tells a dropped job (``dropped:<id>``,
kept twice the nonce's lifetime: post again) from one released and gone since (run: the post is done), so a
lost reply or a slow poster never makes a second job. A poster dying between the calls leaves a held job:
every board's sweep (:meth:`Keys.sweep`, with the links' sweep) takes the record for it or drops it, as its
poster would have, past the retry window. A settle of a job whose key's record is elsewhere tells that
partition (an outbox entry, :mod:`.links`): the record expires after the key's retention, as on one slot. A
record naming a job elsewhere is also checked later (at the job's age, doubling; the backstop), and removed
once nothing of it is left. A requeue of such a job takes the record again, or loses its key (:meth:`requeue`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from jobboard.backend import Prepared
from jobboard.errors import BackendUnavailable, DependencyMissing, InvalidJob
from jobboard.job import Job
from jobboard_redis.board import RedisBackend
from jobboard_redis.posting import arguments, job_from_reply
from jobboard_redis.records import job_of, text
from jobboard_redis.spread.layout import partition_of
from jobboard_redis.spread.links import Forwarder

__all__ = ["Keys"]

ROUNDS = 8
"""Times a post starts over when the job it found or made was gone meanwhile (each needs another's call)."""
CHECK_MS = 60_000
"""A record naming a job elsewhere is first checked this long after it was made (then at the job's age)."""
DUE_LIMIT = 50
"""Records one ``keys_due`` call answers at most (links.lua)."""
DUE_ROUNDS = 20
"""``keys_due`` calls a sweep makes at most per partition while each answers ``DUE_LIMIT`` (a backlog)."""
EPOCH_MS = 1_577_836_800_000
"""A spread board's ids count microseconds from this time (post.lua's next_ids)."""


class Keys:
    """The keys of a spread board over ``parts``; ``part_of`` names a job's partition, ``links`` links a held
    job's dependencies elsewhere."""

    def __init__(self, parts: Sequence[RedisBackend], part_of: Callable[[str], RedisBackend],
                 links: Forwarder) -> None:
        self.parts = parts
        self.part_of = part_of
        self.links = links

    def index_of(self, key: str) -> int:
        """The partition holding ``key``'s record."""
        return partition_of(key, len(self.parts))

    async def find(self, job_id: str) -> Job | None:
        """The job as a keyed post answers it (as posted, or as settled), or ``None``: nothing of it is left (or
        only a trash entry older than the key's retention)."""
        part = self.part_of(job_id)
        status, data = await part._call("keyed", "", job_id, part._retention_ms)
        return job_of(text(data[0]), data[1], data[2], data[3], data[4]) if status == "keyed" else None

    async def resolve(self, part: RedisBackend, key: str, far: str) -> Job | None:
        """A post in ``part`` (the key's partition) found the record naming job ``far`` of another partition:
        that job, or ``None`` once the record no longer names it (nothing of it left: post again)."""
        found = await self.find(far)
        if found is None:
            await part._call("key_swap", "", key, far, "", CHECK_MS)
        return found

    async def post_elsewhere(self, part: RedisBackend, prepared: Prepared) -> Job:
        """Post keyed ``prepared`` in ``part``, not its key's partition (see the module docstring).

        :raises DependencyMissing: a dependency was not on the board (nothing posted).
        :raises BackendUnavailable: a partition could not be reached (posting again is safe: the key finds
            the job if it was posted)."""
        posting = prepared.posting
        assert posting.key is not None
        for attempt in range(ROUNDS):
            nonce = f"{posting.token}{f'.{attempt}' if attempt else ''}:{part.options.nonce_ms}"
            status, data = await part._call("post_held", nonce, *arguments(posting, prepared.raw))
            job = job_from_reply(posting, status, data)
            if status != "keyed" and any(self.part_of(dep) is not part for dep in posting.depends_on):
                missing = await self.links.link(part, job.id, posting.depends_on, nonce)
                if missing is not None:
                    raise DependencyMissing.of(posting.name, missing)
            held = status != "keyed" or data[5] == b"1"  # else released: the record named it then
            outcome, winner = await self.arbitrate(part, posting.key, job.id, release=held)
            if outcome == "mine":
                return job
            if winner is not None:
                return winner
        raise BackendUnavailable(f"post of {posting.name!r}: its key's job kept going ({ROUNDS} rounds); post again")

    async def arbitrate(self, part: RedisBackend, key: str, job_id: str, *,
                        release: bool = True) -> tuple[str, Job | None]:
        """Steps 2 and 3 for job ``job_id`` of ``part`` (posted with ``key``, maybe held; ``release=False``:
        known released, step 3 skipped): ``("mine", None)`` once the record names it and it is released (or
        was, and is gone since); ``("lost", winner)`` when another job holds the key (``job_id`` dropped if
        held); ``("gone", None)`` when ``job_id`` was dropped meanwhile (by a sweep: post again)."""
        home = self.parts[self.index_of(key)]
        for _ in range(ROUNDS):
            status, data = await home._call("key_take", "", key, job_id, CHECK_MS)
            if status == "mine":
                if not release:
                    return "mine", None
                released, _ = await part._call("release", "", job_id)  # 'gone': released, then run and gone
                return ("gone" if released == "dropped" else "mine"), None
            if status == "keyed":
                winner: Job | None = job_of(text(data[0]), data[1], data[2], data[3], data[4])
            elif (winner := await self.find(far := text(data[0]))) is None:
                await home._call("key_swap", "", key, far, job_id, CHECK_MS)
                continue
            await part._call("drop_held", "", job_id, part._retention_ms, 2 * part.options.nonce_ms)
            return "lost", winner
        raise BackendUnavailable(f"key {key!r}: its record kept changing ({ROUNDS} rounds); post again")

    async def requeue(self, part: RedisBackend, job_id: str, reset_attempts: bool) -> Job:
        """Requeue ``job_id`` of ``part``; if its key's record is in another partition, the record names it
        again first (``key_take``), or the job loses its key when the record names another job on the board
        (as on one slot): two jobs of one key are never both claimable.

        :raises InvalidJob: its keyed post is not finished (held); else as the board's ``requeue``."""
        prefix = part.options.prefix
        key_b, requeues = await part.client.command("HMGET", prefix + "tr:" + job_id, "key", "nrq")
        key = text(key_b or b"")
        if key and self.parts[self.index_of(key)] is not part:
            if await part.client.command("ZSCORE", prefix + "kh", job_id) is not None:
                raise InvalidJob(f"job {job_id} is held by its keyed post, not finished yet: requeue it once "
                                 "its post (or the sweep) has named or dropped it")
            await self.links.forward(part)  # its settle's entry applied first: it would expire the record
            await part._call("requeue_mark", "", job_id, part.options.nonce_ms)  # found meanwhile, however old
            if await self._retake(key, job_id, int(requeues or 0) + 1) is not None:  # its record: this requeue
                await part._call("key_clear", "", job_id, key)
        return await part.requeue(job_id, reset_attempts)

    async def _retake(self, key: str, job_id: str, requeues: int) -> Job | None:
        """The key's record names ``job_id`` again (``None``), kept with ``requeues`` (the job's count once
        requeued: a settle's entry of fewer leaves it), unless it names another job still on the board (that
        job)."""
        home = self.parts[self.index_of(key)]
        for _ in range(ROUNDS):
            status, data = await home._call("key_take", "", key, job_id, CHECK_MS, requeues)
            if status == "mine":
                return None
            if status == "keyed":
                return job_of(text(data[0]), data[1], data[2], data[3], data[4])
            if (winner := await self.find(far := text(data[0]))) is not None:
                return winner
            await home._call("key_swap", "", key, far, job_id, CHECK_MS)
        raise BackendUnavailable(f"key {key!r}: its record kept changing ({ROUNDS} rounds); requeue again")

    async def sweep(self, part: RedisBackend) -> None:
        """Finish the keyed posts held in ``part`` past the retry window (their poster died between its calls),
        and check the records due there (a record naming a job of which nothing is left is removed; up to
        ``DUE_LIMIT * DUE_ROUNDS``): one call when there is nothing to do.

        :raises JobBoardError: a partition could not be reached (the rest waits for the next sweep)."""
        _, (held, due) = await part._call("key_sweep", "", part.options.nonce_ms)
        await self._finish(part, held)
        for _ in range(DUE_ROUNDS):
            if await self._check(part, due) < DUE_LIMIT:
                break
            _, due = await part._call("keys_due", "")

    async def finish(self, part: RedisBackend, older_than_ms: int) -> int:
        """Steps 2 and 3 for ``part``'s jobs held longer than ``older_than_ms``; how many."""
        _, data = await part._call("held_keys", "", older_than_ms)
        return await self._finish(part, data)

    async def check(self, part: RedisBackend) -> int:
        """Check the records of ``part`` due for it; how many were checked."""
        _, data = await part._call("keys_due", "")
        return await self._check(part, data)

    async def _finish(self, part: RedisBackend, data: list[Any]) -> int:
        for job_id, key in zip(data[::2], data[1::2], strict=True):
            if key:
                await self.arbitrate(part, text(key), text(job_id))
            else:  # gone meanwhile (cancelled, or a dependency trashed): its mark leaves
                await part._call("release", "", job_id)
        return len(data) // 2

    async def _check(self, part: RedisBackend, data: list[Any]) -> int:
        for key, job_id in zip(data[::2], data[1::2], strict=True):
            if await self.find(text(job_id)) is None:
                await part._call("key_swap", "", key, job_id, "", CHECK_MS)
            else:
                age_ms = time.time() * 1000 - (EPOCH_MS + int(job_id) // 1000)
                await part._call("key_later", "", key, max(CHECK_MS, int(age_ms)))
        return len(data) // 2
