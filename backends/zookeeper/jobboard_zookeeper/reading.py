"""Reading what a board leaves behind: the trash and the outcomes of finished jobs."""

from __future__ import annotations

from collections.abc import Callable

from jobboard.codec import MalformedEntry, decode_posting, decode_value
from jobboard.job import JobState, Outcome, TrashedJob
from jobboard_zookeeper.layout import Paths, TrashRecord, sequence_of
from jobboard_zookeeper.retention import unpack_result
from jobboard_zookeeper.zk import ZooKeeper


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
