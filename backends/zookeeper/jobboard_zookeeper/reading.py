"""Reading what a board holds and leaves behind: jobs as stored, listings, states, owners of claims,
the trash, outcomes of finished jobs (:class:`Reader`; no writes here).

Every read is one or a few ``get`` / ``exists`` / ``getChildren`` requests, run concurrently where
they are independent; none is atomic with another (a job may move between two reads: see
:meth:`Reader.stored` for the order that cannot miss one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, replace

from jobboard.board.codec import MalformedEntry, Posting, decode_posting, decode_value
from jobboard.job import Job, JobState, ListedJob, Outcome, TrashedJob, wanted
from jobboard_zookeeper.layout import LockRecord, Paths, TrashRecord, is_job_id, lock_progress, sequence_of
from jobboard_zookeeper.partitions import list_dir
from jobboard_zookeeper.posting import last_sequence
from jobboard_zookeeper.refusals import not_found
from jobboard_zookeeper.retention import unpack_result
from jobboard_zookeeper.view import BoardView
from jobboard_zookeeper.zk import ZooKeeper

READ_BATCH = 256
"""Jobs read concurrently while listing."""
Session = Callable[[], ZooKeeper]
"""The board's open session (:raises BoardClosed: once the board is closed)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A job node as read: where, its bytes, its decoded posting and version."""

    path: str
    raw: bytes
    posting: Posting
    version: int
    num_children: int = 0


async def read_stored(zk: ZooKeeper, path: str) -> Stored | None:
    """The job node at ``path`` (one ``get``), or ``None``. :raises MalformedEntry: it holds no valid posting."""
    found = await zk.get(path)
    if found is None:
        return None
    raw, stat = found
    return Stored(path, raw, decode_posting(raw), stat.version, stat.num_children)


class Reader:
    """One board's reads of jobs and of what it holds (see the module docstring); ``zk``: the session
    itself, for the reads of jobs the claimers and waiters make (as the settler reads them)."""

    def __init__(self, session: Session, zk: ZooKeeper, paths: Paths, view: BoardView,
                 report_malformed: Callable[[str], None]) -> None:
        self._session, self._zk, self._paths, self._view = session, zk, paths, view
        self._report_malformed = report_malformed

    async def stored(self, job: str, *, claimable_only: bool = False) -> Stored | None:
        """The job's node in waiting/ or jobs/ (that order: see ``Poster.locate``), or ``None``.

        Malformed nodes are reported (once) and passed over from then on.
        """
        paths = [self._paths.job(job)] if claimable_only else [self._paths.waiting(job), self._paths.job(job)]
        for path in paths:
            try:
                stored = await read_stored(self._zk, path)
            except MalformedEntry:
                self._report_malformed(job)
                self._view.skip_until(job, float("inf"))
                return None
            if stored is not None:
                self._view.names[job] = stored.posting.name
                return stored
        return None

    async def readable(self, job: str, names: Collection[str] | None) -> Stored | None:
        """A job of a partition this board does not watch, as read, if it is a candidate (known delays
        pass over it unread)."""
        if self._view.skipped(job):
            return None
        stored = await self.stored(job, claimable_only=True)
        if stored is None or not wanted(stored.posting.name, names):
            return None
        return stored

    async def get(self, job_id: str) -> Job:
        """:raises JobNotFound: the job is not on the board."""
        stored = await self.stored(job_id)
        if stored is None:
            raise not_found(job_id)
        return await self.job_of(job_id, stored)

    async def job_of(self, job_id: str, stored: Stored) -> Job:
        """The job as read, with the progress its claim reported (read only for jobs this board sees claimed)."""
        job = stored.posting.to_job(job_id, sequence_of(job_id))
        if job_id not in self._view.locks and self._view.watches(job_id):
            return job
        found = await self._session().get(self._paths.lock(job_id))
        progress = lock_progress(found[0]) if found is not None else None
        return job if progress is None else replace(job, progress=progress)

    async def children(self, name: str) -> list[str]:
        """The job ids in directory ``name`` (of all its partitions)."""
        return [child for child in await list_dir(self._session(), self._paths, name) if is_job_id(child)]

    def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        return listed_jobs(self._session(), self._paths, self.children, self.stored, self.job_of,
                           only_unclaimed=only_unclaimed)

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.listing(only_unclaimed):
            yield listed.job

    async def state(self, job_id: str) -> JobState:
        """Four reads at once; a job moving meanwhile may be seen in either state."""
        paths, zk = self._paths, self._session()
        job_stat, lock_stat, waiting_stat, trash_stat = await asyncio.gather(
            zk.exists(paths.job(job_id)), zk.exists(paths.lock(job_id)),
            zk.exists(paths.waiting(job_id)), zk.exists(paths.trash(job_id)))
        if job_stat is not None:
            return JobState.CLAIMED if lock_stat is not None else JobState.UNCLAIMED
        if waiting_stat is not None:
            return JobState.WAITING
        return JobState.TRASHED if trash_stat is not None else JobState.COMPLETE

    async def owner(self, job_id: str) -> str | None:
        return (await lock_owners(self._session(), self._paths, [job_id])).get(job_id)

    async def job_count(self) -> int:
        return len(await self.children("jobs")) + len(await self.children("waiting"))

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        for item in await trash_items(self._session(), self._paths, await self.children("trash"),
                                      self._report_malformed):
            yield item

    async def outcome(self, job_id: str) -> Outcome:
        """How a job that left the board ended."""
        return await outcome(self._session(), self._paths, job_id)

    @staticmethod
    def could_be_job_id(job_id: str) -> bool:
        """Ids here are ``<rank>-<sequence>`` (see :mod:`jobboard_zookeeper.layout`)."""
        return job_id.isascii() and is_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        """Past the board's counter: two reads."""
        return (not self.could_be_job_id(job_id)
                or sequence_of(job_id) > await last_sequence(self._session(), self._paths))


async def lock_owners(zk: ZooKeeper, paths: Paths, job_ids: list[str]) -> dict[str, str]:
    """The owner of each of ``job_ids``' lock that is still there and readable (one read each, concurrent)."""
    found = await asyncio.gather(*(zk.get(paths.lock(job)) for job in job_ids))
    owners = {}
    for job, lock in zip(job_ids, found, strict=True):
        if lock is not None:
            try:
                owners[job] = LockRecord.decode(lock[0]).owner
            except MalformedEntry:
                continue
    return owners


async def listed_jobs(zk: ZooKeeper, paths: Paths, children: Callable[[str], Awaitable[list[str]]],
                      read: Callable[[str], Awaitable[Stored | None]],
                      to_job: Callable[[str, Stored], Awaitable[Job]], *,
                      only_unclaimed: bool = False) -> AsyncIterator[ListedJob]:
    """The board's jobs in board order, with state and owner: three listings, one read per job
    (``read``, batched concurrently) and one per claimed job's lock."""
    jobs, waiting, locks = await asyncio.gather(*map(children, ("jobs", "waiting", "locks")))
    locked = set(locks).intersection(jobs)
    owners = await lock_owners(zk, paths, sorted(locked))
    ids = sorted(set(jobs) - locked) if only_unclaimed else sorted(jobs + waiting)
    for start in range(0, len(ids), READ_BATCH):
        batch = ids[start:start + READ_BATCH]
        for job, stored in zip(batch, await asyncio.gather(*map(read, batch)), strict=True):
            if stored is not None:
                state = listed_state(job, waiting, locked)
                yield ListedJob(await to_job(job, stored), state, owners.get(job))


def listed_state(job: str, waiting: Collection[str], locked: Collection[str]) -> JobState:
    """The state of a listed job from the directory listings it was found in."""
    if job in waiting:
        return JobState.WAITING
    return JobState.CLAIMED if job in locked else JobState.UNCLAIMED


async def trash_items(zk: ZooKeeper, paths: Paths, job_ids: list[str],
                      report_malformed: Callable[[str], None]) -> list[TrashedJob]:
    """The trashed jobs, oldest trashing first; malformed records are reported and skipped."""
    items = []
    for job in job_ids:
        found = await zk.get(paths.trash(job))
        if found is None:
            continue
        try:
            record = TrashRecord.decode(found[0])
            posting = decode_posting(record.posting)
        except MalformedEntry:
            report_malformed(job)
            continue
        items.append(TrashedJob(posting.to_job(job, sequence_of(job)), record.reason, record.trashed_at))
    return sorted(items, key=lambda trashed: (trashed.trashed_at, trashed.job.sequence))


async def outcome(zk: ZooKeeper, paths: Paths, job: str) -> Outcome:
    """How a job that left the board ended: trashed (with the reason) or complete (with a kept result)."""
    trashed = await zk.get(paths.trash(job))
    if trashed is not None:
        return Outcome(job, JobState.TRASHED, reason=TrashRecord.decode(trashed[0]).reason)
    kept = await zk.get(paths.result(job))
    return Outcome(job, JobState.COMPLETE, result=decode_value(unpack_result(kept[0])[0]) if kept else None)
