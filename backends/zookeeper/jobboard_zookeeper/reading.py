"""Reading what a board holds and leaves behind: owners of claims, the trash, outcomes of finished jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from jobboard.codec import MalformedEntry, decode_posting, decode_value
from jobboard.job import JobState, Outcome, TrashedJob
from jobboard_zookeeper.layout import LockRecord, Paths, TrashRecord, sequence_of
from jobboard_zookeeper.zk import ZooKeeper


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
    return Outcome(job, JobState.COMPLETE, result=decode_value(kept[0]) if kept else None)
