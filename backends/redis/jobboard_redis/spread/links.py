"""Links between the partitions of a spread board (``links.lua``; docs/backends/redis.md).

A dependent is posted in one partition; each dependency in another partition is linked afterwards (``link``
adds the dependent to the dependency's ``dents`` there); a dependency gone by then undoes the post
(``unlink`` the links made, ``unpost`` the dependent: ``DependencyMissing``, as on one slot). A consume or
trash of a dependency with dependents elsewhere writes entries to its partition's outbox in the same call;
:class:`Forwarder` sends each one to the dependent's partition (``deliver``: the result, once; ``cascade``:
to the trash) and then removes it: at least once (by any board, and again after a lost reply), each one
idempotent. A settle of a keyed job whose key's record is in another partition writes an entry too (``key``:
that record expires after the key's retention if it still names the job, ``key_settled``; not urgent: it goes
with the next forwarding or sweep, several in one call). A ``key`` entry goes with its job's requeue count,
read with it (``out_read``): one applied late, after the job's requeue named it again, is of an earlier settle
and leaves the record as it is (the record keeps the count it was named with, ``kg:<key>``).
The board whose call wrote the other entries forwards them before that call returns; every board also sweeps the outboxes every :data:`SWEEP` seconds, for entries whose writer died
before forwarding them, and links (or undoes) the dependents still pending past the retry window (their
poster died between the post and its links).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgpack

from jobboard.backend import Prepared
from jobboard.errors import DependencyMissing, JobBoardError, JobNotFound
from jobboard.job import Job
from jobboard_redis.board import RedisBackend
from jobboard_redis.posting import arguments, job_from_reply
from jobboard_redis.records import text
from jobboard_redis.spread.layout import partition_of

logger = logging.getLogger(__name__)

SWEEP = 5.0
"""Seconds between two sweeps of the outboxes by each board."""
BATCH = 100


KINDS = (b"deliver", b"trash", b"key")


def outbox_entry(entry: bytes) -> tuple[bytes, bytes, bytes, Any] | None:
    """An outbox entry's (kind, dependent, dependency, payload), or None when it is not one this board wrote: not
    msgpack, not four fields, an unknown kind, or a dependent that is not a job id (of a ``key`` entry: a key)."""
    try:
        kind, dependent, dependency, payload = msgpack.unpackb(entry, raw=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if kind not in KINDS or not isinstance(dependent, bytes) or not isinstance(dependency, bytes):
        return None
    if kind != b"key" and not (dependent.isdigit() and len(dependent) <= 40):
        return None
    if not isinstance(payload, bytes):  # the board writes strings only (a result, a reason, a retention)
        return None
    return kind, dependent, dependency, payload


class Forwarder:
    """Forwards the outbox entries of a spread board's partitions; ``part_of`` names a job's partition."""

    def __init__(self, parts: Sequence[RedisBackend], part_of: Callable[[str], RedisBackend]) -> None:
        self.parts = parts
        self.part_of = part_of

    async def forward(self, part: RedisBackend) -> None:
        """Send every entry of ``part``'s outbox to its dependent's partition, removing each once applied.

        :raises JobBoardError: a partition could not be reached (the entries left are swept later)."""
        key = part.options.prefix + "out"
        while (read := (await part._call("out_read", "", BATCH))[1]):
            settled: dict[int, list[bytes | int]] = {}  # a job settled whose key's record is elsewhere
            applied: list[bytes] = []
            for entry, requeues in zip(read[::2], read[1::2], strict=True):
                if (decoded := outbox_entry(entry)) is None:
                    logger.error("%s: a malformed outbox entry skipped and removed: %r", part.url, entry[:200])
                    await part.client.command("LREM", key, 1, entry)
                    continue
                kind, dependent, dependency, payload = decoded
                if kind == b"key":  # (key, job, retention ms, its requeues): applied together per partition
                    settled.setdefault(partition_of(text(dependent), len(self.parts)), []).extend(
                        (dependent, dependency, payload, requeues))
                    applied.append(entry)
                    continue
                target = self.part_of(text(dependent))
                if kind == b"deliver":
                    await target._call("deliver", "", dependent, dependency, payload)
                else:
                    await target._call("cascade", "", dependent, payload, target._retention_ms)
                await part.client.command("LREM", key, 1, entry)
            await self._settle_keys(part, settled, applied)

    async def _settle_keys(self, part: RedisBackend, settled: dict[int, list[bytes | int]],
                           entries: list[bytes]) -> None:
        """Apply ``settled`` (the key entries of ``part``'s outbox, by their records' partition), one call each,
        then remove ``entries`` (theirs) in one call."""
        for index, triples in settled.items():
            await self.parts[index]._call("key_settled", "", *triples)
        if entries:
            await part._call("out_done", "", *entries)

    async def sweep_forever(self, *also: Callable[[RedisBackend], Awaitable[None]]) -> None:
        """Forward what others left in the outboxes (a board that died between a call and its forwarding),
        finish the links of dependents whose poster died before it linked them, and run ``also`` on each
        partition (the keys' sweep, :mod:`.keys`)."""
        while True:
            await anyio.sleep(SWEEP)
            for part in self.parts:
                try:
                    if await part.client.command("LLEN", part.options.prefix + "out"):
                        await self.forward(part)
                    await self.relink(part, part.options.nonce_ms)  # the poster's retries are over by then
                    for sweep in also:
                        await sweep(part)
                except JobBoardError as error:
                    logger.warning("%s: its sweep failed (%s); again in %g s", part.url, error, SWEEP)
                except Exception:  # never let the sweep die
                    logger.exception("%s: its sweep failed; again in %g s", part.url, SWEEP)

    async def post_linked(self, part: RedisBackend, prepared: Prepared) -> Job:
        """Post ``prepared`` in ``part``, then link its dependencies of other partitions.

        Not atomic across partitions: until its last link the dependent is listed, waiting, and pending in
        ``part`` (a sweep links it, or undoes it, if this board dies before).
        :raises DependencyMissing: a dependency was not on the board (the post undone)."""
        posting, nonce = prepared.posting, f"{prepared.posting.token}:{part.options.nonce_ms}"
        status, data = await part._call("post", nonce, *arguments(posting, prepared.raw))
        job = job_from_reply(posting, status, data)
        if status != "ok":  # an existing job (its own post linked it), or the key's record names one elsewhere
            return job
        missing = await self.link(part, job.id, posting.depends_on, nonce)
        if missing is not None:
            raise DependencyMissing.of(posting.name, missing)
        return job

    async def link(self, part: RedisBackend, job_id: str, deps: Sequence[str], nonce: str) -> str | None:
        """Link ``job_id`` (posted in ``part``) to its dependencies elsewhere. ``None`` once linked (or found
        linked by another); else the dependency that was gone, the dependent removed (``unpost``)."""
        linked: list[str] = []
        for dep in deps:
            if self.part_of(dep) is part:
                continue
            reply, _ = await self.part_of(dep)._call("link", "", dep, job_id)
            if reply == "nodep":
                undone, _ = await part._call("unpost", "", job_id, nonce,
                                             *(local for local in deps if self.part_of(local) is part))
                if undone == "linked":  # a sweep finished it first: it stays, linked
                    return None
                for done in linked:
                    await self.part_of(done)._call("unlink", "", done, job_id)
                return dep
            linked.append(dep)
        await part._call("linked", "", job_id)
        return None

    async def relink(self, part: RedisBackend, older_than_ms: int) -> int:
        """Finish the links of ``part``'s dependents pending longer than ``older_than_ms``; how many."""
        _, data = await part._call("unlinked", "", older_than_ms)
        for job_id, nonce in zip(data[::2], data[1::2], strict=True):
            try:
                job = await part.get(text(job_id))
            except JobNotFound:  # trashed (or consumed) meanwhile: nothing to link
                await part._call("linked", "", job_id)
                continue
            await self.link(part, job.id, job.depends_on, text(nonce))
        return len(data) // 2
