"""Progress of running jobs, purge and requeue on ZooKeeper (a base of ``ZooKeeperBackend``).

* progress = get(lock), then check(job, generation) + set_data(lock, owner + nonce + progress,
  version read): two round trips; the claim's own ephemeral node carries it, so it goes with the claim;
* purge    = delete(trash/<id>, version) [+ delete(keys/<key>)], in batches;
* requeue  = create(jobs/<id>, posting) + delete(trash/<id>, version) + the key back to
  "on the board": one multi. The job keeps its id, so its place in the board order.
"""

from __future__ import annotations

import time
from dataclasses import replace

from jobboard.board.codec import (
    MalformedEntry,
    Posting,
    decode_posting,
    decode_value,
    encode_posting,
    encode_value,
)
from jobboard.errors import BackendUnavailable, BoardConflict, ClaimLost, InvalidJob, JobNotFound, NotOwner
from jobboard.job import Claim, Job, Progress
from jobboard_zookeeper.base import ZooKeeperBase
from jobboard_zookeeper.keys import KeyRecord
from jobboard_zookeeper.layout import TrashRecord, is_job_id, sequence_of
from jobboard_zookeeper.linked import Stored
from jobboard_zookeeper.ops import Check, Create, Delete, Op, OutcomeUnknown, SetData
from jobboard_zookeeper.options import parse_zookeeper_url
from jobboard_zookeeper.posting import last_sequence
from jobboard_zookeeper.refusals import not_found
from jobboard_zookeeper.retention import DELETE_BATCH, key_deletes, retain_forever


def lock_progress(data: bytes) -> Progress | None:
    """The progress stored in a lock node's data, if any."""
    try:
        record = decode_value(data)
        found = record.get("progress") if isinstance(record, dict) else None
        if not isinstance(found, dict):
            return None
        return Progress(float(found["f"]), str(found.get("n", "")), float(found.get("at", 0.0)))
    except (MalformedEntry, KeyError, TypeError, ValueError):
        return None


class KeepingBoard(ZooKeeperBase):
    """Progress, purge and requeue for :class:`~jobboard_zookeeper.board.ZooKeeperBackend`."""


    def __init__(self, url: str) -> None:
        super().__init__(url)
        options = parse_zookeeper_url(url)
        self.result_ttl, self.trash_ttl = options.result_ttl, options.trash_ttl


    async def get(self, job_id: str) -> Job:
        found = job_id
        stored = await self._stored(found)
        if stored is None:
            raise not_found(found)
        return await self.job_of(found, stored)

    async def job_of(self, job_id: str, stored: Stored) -> Job:
        """The job as read, with the progress its claim reported (read only for jobs this board sees claimed)."""
        job = stored.posting.to_job(job_id, sequence_of(job_id))
        if job_id not in self.view.locks and self.view.watches(job_id):
            return job
        found = await self.zk.get(self._paths.lock(job_id))
        progress = lock_progress(found[0]) if found is not None else None
        return job if progress is None else replace(job, progress=progress)

    async def retain_forever(self) -> None:
        """Collect expired results and trash entries when this board is the collector (a task of the board)."""
        await retain_forever(self.zk, self._paths, self.result_ttl, self.trash_ttl)

    def could_be_job_id(self, job_id: str) -> bool:
        """Ids here are ``<rank>-<sequence>`` (see :mod:`jobboard_zookeeper.layout`)."""
        return job_id.isascii() and is_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        """Past the board's counter: two reads."""
        return not self.could_be_job_id(job_id) or sequence_of(job_id) > await last_sequence(self.zk, self._paths)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        job_id = claim.job.id
        found = await self.zk.get(self._paths.lock(job_id))
        record = decode_value(found[0]) if found is not None else None
        if found is None or not isinstance(record, dict):
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        if record.get("owner") != claim.owner:  # another owner's claim, or this one's gone: which?
            stat = await self.zk.exists(self._paths.job(job_id))
            if stat is not None and stat.version == claim.generation:
                raise NotOwner(f"job {job_id} is owned by {record.get('owner')}, not {claim.owner}")
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        record["progress"] = {"f": progress.fraction, "n": progress.note, "at": progress.at}
        ops: list[Op] = [Check(self._paths.job(job_id), claim.generation),
                         SetData(self._paths.lock(job_id), encode_value(record, what="lock"), found[1].version)]
        result = await self.zk.multi(ops)  # a lost reply: BackendUnavailable (the next report repeats it)
        if not result.ok:
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")

    async def purge(self, older_than: float) -> int:
        age = older_than
        listing = await self.zk.children(self._paths.dir("trash"))
        now, removed = time.time(), 0
        doomed: list[list[Op]] = []
        for name in sorted(listing[0] if listing else []):
            if not is_job_id(name):
                continue
            found = await self.zk.get(self._paths.trash(name))
            if found is None:
                continue
            try:
                record = TrashRecord.decode(found[0])
                key = decode_posting(record.posting).key
            except MalformedEntry:
                record, key = TrashRecord(b"", "", found[1].mtime), None
            if now - max(record.trashed_at, found[1].mtime) >= age:
                doomed.append([Delete(self._paths.trash(name), found[1].version),
                               *await key_deletes(self.zk, self._paths, name, key)])
        for start in range(0, len(doomed), DELETE_BATCH):
            removed += await self._delete_all(doomed[start:start + DELETE_BATCH])
        return removed

    async def _delete_all(self, groups: list[list[Op]]) -> int:
        """Run each group of deletes; in one multi if none conflicts, else one group at a time."""
        try:
            if (await self.zk.multi([op for group in groups for op in group])).ok:
                return len(groups)
        except OutcomeUnknown:
            pass
        removed = 0
        for group in groups:
            removed += (await self.zk.multi(group, retry_safe=True)).ok
        return removed

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        for _ in range(5):
            found = await self.zk.get(self._paths.trash(job_id))
            if found is None:
                raise JobNotFound(f"job {job_id} is not in the trash")
            try:
                posting = decode_posting(TrashRecord.decode(found[0]).posting)
            except MalformedEntry as error:
                raise BoardConflict(f"trash entry of job {job_id} is not readable: {error}") from None
            if posting.waiting_on:
                raise InvalidJob(f"job {job_id} waits for {', '.join(posting.waiting_on)}, whose result never "
                                 "came (it was trashed with a dependency): post it again instead")
            posting = posting.delayed(None)
            posting = posting.reset_attempts() if reset_attempts else posting
            key_ops, posting = await self._key_back(job_id, posting)
            ops: list[Op] = [Create(self._paths.job(job_id), encode_posting(posting)),
                             Delete(self._paths.trash(job_id), found[1].version), *key_ops]
            try:
                result = await self.zk.multi(ops)
            except OutcomeUnknown:
                await self.zk.sync(self._paths.trash(job_id))
                if await self.zk.exists(self._paths.trash(job_id)) is None:
                    return posting.to_job(job_id, sequence_of(job_id))
                continue
            if result.ok:
                return posting.to_job(job_id, sequence_of(job_id))
        raise BackendUnavailable(f"requeueing job {job_id} kept conflicting with concurrent changes")

    async def _key_back(self, job_id: str, posting: Posting) -> tuple[list[Op], Posting]:
        """The ops that make the job's key find it on the board again (none, and the key dropped
        from the posting, if the key finds another job since)."""
        if posting.key is None:
            return [], posting
        path = self._paths.key(posting.key)
        found = await self.zk.get(path)
        if found is None:
            return [Create(path, KeyRecord(job_id).encode())], posting
        try:
            mine = KeyRecord.decode(found[0]).job_id == job_id
        except MalformedEntry:
            mine = False
        if not mine:
            return [], posting.without_key()
        return [SetData(path, KeyRecord(job_id).encode(), found[1].version)], posting
