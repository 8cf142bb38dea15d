"""Reading what a board holds and leaves behind: owners of claims, the trash, outcomes of finished jobs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection

from jobboard.board.codec import MalformedEntry, decode_posting, decode_value
from jobboard.job import Job, JobState, ListedJob, Outcome, TrashedJob
from jobboard_zookeeper.layout import LockRecord, Paths, TrashRecord, sequence_of
from jobboard_zookeeper.linked import Stored
from jobboard_zookeeper.retention import unpack_result
from jobboard_zookeeper.zk import ZooKeeper

READ_BATCH = 256
"""Jobs read concurrently while listing."""


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
