"""Posting on ZooKeeper: exactly once, with ids allocated before the write.

A job's sequence is the new data version of a counter node. Its id names the
nodes the post creates, all in one multi: ``jobs/<id>``, or for a linked job
``waiting/<id>`` plus a link ``<dependency>/<id>`` under each dependency (a
dependency that is gone makes the whole multi fail), the key node for a keyed
post, and a write marker. An unlinked post is one request while this board is
the only one posting: the multi also moves the counter from the version this
board expects (:mod:`jobboard_zookeeper.chain`). Otherwise, and after such a
multi failed, the sequence is taken first with one ``set_data`` at any version
(cheap, never contended, a replay only skips a number). A lost reply is
resolved by the marker (:mod:`jobboard_zookeeper.markers`): the post is sent
again only if the first one was certainly not applied, so a job consumed before
the poster reads back is never posted twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jobboard.board.codec import MalformedEntry, Posting, decode_posting
from jobboard.errors import BackendUnavailable, BoardConflict, DependencyMissing, InvalidJob, UnknownOutcome
from jobboard.job import Job
from jobboard_zookeeper.chain import Chain
from jobboard_zookeeper.keys import KeyRecord, expired
from jobboard_zookeeper.layout import EPOCH_SIZE, Paths, TrashRecord, job_id, sequence_of
from jobboard_zookeeper.markers import Marker, Markers
from jobboard_zookeeper.ops import Create, Op, OutcomeUnknown, SetData, Stat, TxnResult
from jobboard_zookeeper.zk import ZooKeeper

T = TypeVar("T")

RACE_RETRIES = 5


def counter_moved(result: TxnResult, bumps: list[Op]) -> bool:
    """Whether a chained multi failed because the counter was not at the version it expected."""
    failure = result.failure()
    return failure is not None and any(failure[0] is bump for bump in bumps)


async def newest_epoch(zk: ZooKeeper, paths: Paths) -> int:
    """The epoch of the board's newest counter (0 when it has none yet)."""
    listed = await zk.children(paths.dir("counters"))
    return max((int(name[2:]) for name in (listed[0] if listed else []) if name[2:].isdigit()), default=0)


async def last_sequence(zk: ZooKeeper, paths: Paths) -> int:
    """The sequence of the last id the board gave (0: none yet): its newest counter's version."""
    epoch = await newest_epoch(zk, paths)
    stat = await zk.exists(paths.counter(epoch))
    return epoch * EPOCH_SIZE + (stat.version if stat is not None else 0)


class Poster:
    """Allocates job ids and writes postings for one board."""

    def __init__(self, zk: ZooKeeper, paths: Paths, markers: Markers, key_retention: float) -> None:
        self._zk, self._paths, self._markers = zk, paths, markers
        self._key_retention = key_retention
        self._epoch = 0
        self._server_now = 0.0
        """The server's clock at the last counter bump (key retention is judged by it)."""
        self.chain = Chain()

    async def open(self) -> None:
        """Find the current counter (a new one is started before a version could overflow)."""
        self._epoch = await newest_epoch(self._zk, self._paths)
        await self._zk.ensure_path(self._paths.counter(self._epoch))
        stat = await self._zk.exists(self._paths.counter(self._epoch))
        if stat is not None:
            self.chain.start(self._epoch, stat.version)

    async def next_sequence(self) -> int:
        while True:
            epoch = self._epoch
            stat = await self._bump(epoch)
            self._server_now, version = stat.mtime, stat.version
            if version < EPOCH_SIZE:
                return epoch * EPOCH_SIZE + version
            await self._zk.ensure_path(self._paths.counter(epoch + 1))
            self._epoch = max(self._epoch, epoch + 1)

    async def _bump(self, epoch: int) -> Stat:
        return await self._counter_write(epoch, self._zk.bump(self._paths.counter(epoch)), lambda stat: stat.version)

    async def _counter_write(self, epoch: int, write: Awaitable[T], version_of: Callable[[T], int | None]) -> T:
        """``write`` of the counter of ``epoch``, the chain told before and after (its new version)."""
        self.chain.bumping()
        try:
            result = await write
        except BaseException:
            self.chain.bumped(epoch, None)
            raise
        self.chain.bumped(epoch, version_of(result))
        return result

    async def sequences(self, count: int) -> list[int]:
        """``count`` job sequences in one request: a multi of ``count`` counter bumps (the
        versions are consecutive; a replay after a lost reply only skips numbers)."""
        epoch = self._epoch
        bumps = self._zk.multi([SetData(self._paths.counter(epoch), b"", -1)] * count, retry_safe=True)
        result = await self._counter_write(epoch, bumps, lambda done: done.versions[-1] if done.ok else None)
        if not result.ok:
            raise BackendUnavailable(f"allocating {count} job ids failed: {result.failure()}")
        versions = [version for version in result.versions if version is not None]
        if versions[-1] < EPOCH_SIZE:
            return [epoch * EPOCH_SIZE + version for version in versions]
        return [await self.next_sequence() for _ in range(count)]  # the epoch is full: move on

    async def post_one(self, posting: Posting, raw: bytes) -> Job:
        """Store an encoded posting once, alone, its sequence taken first (a linked post, or a keyed
        one whose chunk failed); a keyed post may return the job its key finds.

        :raises InvalidJob: a dependency is not on the board (nothing is written).
        :raises BackendUnavailable: not connected (a keyed post may be repeated safely).
        :raises UnknownOutcome: a lost reply could not be resolved in time.
        """
        sequence = await self.next_sequence()
        new_id = job_id(posting.priority, sequence)
        takeover: int | None = None  # the version of an expired key this post takes over
        lost = False
        for _ in range(RACE_RETRIES):
            try:
                ops = await self._ops(new_id, posting, raw, takeover)
            except InvalidJob:  # a dependency went: the key may still find the job posted before
                found = await self._keyed(posting) if posting.key is not None else None
                if isinstance(found, Job):
                    return found
                raise
            marker = self._markers.new()
            try:
                result = await self._zk.multi([*ops, marker.create()])
            except OutcomeUnknown:
                if await self._resolve(marker, posting):
                    return posting.to_job(new_id, sequence)
                lost = True
                continue  # certainly not applied: the same post again
            lost = False
            if result.ok:
                self._markers.done(marker)
                return posting.to_job(new_id, sequence)
            found = await self._key_conflict(posting, result)
            if isinstance(found, Job):
                return found
            takeover = found
        if lost:
            raise BackendUnavailable(f"job {posting.name!r}: the post was lost {RACE_RETRIES} times on its way "
                                     "(certainly not written); try again")
        raise InvalidJob(f"job {posting.name!r}: its dependencies or key kept changing while it was posted")

    async def _resolve(self, marker: Marker, posting: Posting) -> bool:
        """Whether a post whose reply was lost was applied; unkeyed posts never say "retry"."""
        try:
            return await self._markers.applied(marker)
        except BackendUnavailable as error:
            if posting.key is not None:
                raise  # posting again with the key finds the first post if it was applied
            raise UnknownOutcome(
                f"job {posting.name!r}: the reply to its post was lost and ZooKeeper stayed unreachable, "
                f"so whether it was posted cannot be told ({error}); post with a key to retry safely"
            ) from error

    async def _ops(self, new_id: str, posting: Posting, raw: bytes, takeover: int | None) -> list[Op]:
        ops: list[Op] = []
        if posting.key is not None:
            path, record = self._paths.key(posting.key), KeyRecord(new_id).encode()
            ops.append(Create(path, record) if takeover is None else SetData(path, record, takeover))
        if not posting.depends_on:
            return [*ops, Create(self._paths.job(new_id), raw)]
        ops.append(Create(self._paths.waiting(new_id), raw))
        parents = await asyncio.gather(*map(self.locate, posting.depends_on))
        for dependency, parent in zip(posting.depends_on, parents, strict=True):
            if parent is None:
                raise DependencyMissing.of(posting.name, dependency)
            ops.append(Create(f"{parent}/{new_id}"))
        return ops

    async def _key_conflict(self, posting: Posting, result: TxnResult) -> Job | int | None:
        """After a failed post: the job its key finds, the version of an expired key, or ``None``."""
        failure = result.failure()
        if posting.key is None or failure is None or failure[0].path != self._paths.key(posting.key):
            return None  # a dependency moved: build the post again
        if failure[1] != "NodeExists":
            return None  # the expired key was replaced or collected meanwhile
        return await self._keyed(posting)

    async def _keyed(self, posting: Posting) -> Job | int | None:
        """What the post's key finds: its job, the version of an expired key, or ``None`` (no key)."""
        assert posting.key is not None
        path = self._paths.key(posting.key)
        found = await self._zk.get(path)
        if found is None:
            return None
        try:
            record = KeyRecord.decode(found[0])
            if expired(found[1], record, self._key_retention, self._server_now):
                return found[1].version
            if record.settled is not None:
                return decode_posting(record.settled).to_job(record.job_id, sequence_of(record.job_id))
            return await (self._trashed(record.job_id) if record.trashed else self._live(record.job_id))
        except MalformedEntry as error:
            raise BoardConflict(f"key {posting.key!r} of job {posting.name!r}: {path} holds {error}") from None

    async def _trashed(self, job: str) -> Job | None:
        """The job as it went to the trash (``None`` if its trash entry is gone)."""
        found = await self._zk.get(self._paths.trash(job))
        if found is None:
            return None
        return decode_posting(TrashRecord.decode(found[0]).posting).to_job(job, sequence_of(job))

    async def _live(self, job: str) -> Job | None:
        """The job on the board (``None`` if it was just settled: read the key again)."""
        for path in (self._paths.waiting(job), self._paths.job(job)):
            found = await self._zk.get(path)
            if found is not None:
                return decode_posting(found[0]).to_job(job, sequence_of(job))
        return None

    async def locate(self, job: str) -> str | None:
        """The path of a job on the board (``waiting/`` or ``jobs/``), or ``None``.

        Jobs only move waiting -> jobs -> gone, so reading in that order cannot
        miss a job that moves between the two reads.
        """
        for path in (self._paths.waiting(job), self._paths.job(job)):
            if await self._zk.exists(path) is not None:
                return path
        return None
