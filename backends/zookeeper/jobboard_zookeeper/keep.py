"""Keeping jobs outside the claim cycle on ZooKeeper: progress, purge and requeue (:class:`Keeper`).

* progress = get(lock), then check(job, generation) + set_data(lock, owner + nonce + progress,
  version read; :func:`~jobboard_zookeeper.layout.lock_with_progress`): two round trips; the claim's own
  ephemeral node carries it, so it goes with the claim;
* purge    = delete(trash/<id>, version) [+ delete(keys/<key>)], in batches;
* requeue  = create(jobs/<id>, posting) + delete(trash/<id>, version) + the key back to
  "on the board": one multi. The job keeps its id, so its place in the board order.

Cancel is :mod:`jobboard_zookeeper.cancel`; retention (expired results and trash entries)
:mod:`jobboard_zookeeper.retention`.
"""

from __future__ import annotations

import time

from jobboard.board.codec import MalformedEntry, Posting, decode_posting, encode_posting
from jobboard.errors import BackendUnavailable, BoardConflict, ClaimLost, InvalidJob, JobNotFound, NotOwner
from jobboard.job import Claim, Job, Progress
from jobboard_zookeeper.keys import KeyRecord
from jobboard_zookeeper.layout import Paths, TrashRecord, is_job_id, lock_with_progress, sequence_of
from jobboard_zookeeper.ops import Check, Create, Delete, Op, OutcomeUnknown, SetData
from jobboard_zookeeper.reading import Session
from jobboard_zookeeper.retention import DELETE_BATCH, key_deletes
from jobboard_zookeeper.zk import ZooKeeper


class Keeper:
    """Progress, purge and requeue for one board (see the module docstring)."""

    def __init__(self, session: Session, paths: Paths) -> None:
        self._session, self._paths = session, paths

    @property
    def zk(self) -> ZooKeeper:
        """The board's open session. :raises BoardClosed: the board is closed."""
        return self._session()

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        job_id = claim.job.id
        found = await self.zk.get(self._paths.lock(job_id))
        updated = lock_with_progress(found[0], progress) if found is not None else None
        if found is None or updated is None:
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        owner, data = updated
        if owner != claim.owner:  # another owner's claim, or this one's gone: which?
            stat = await self.zk.exists(self._paths.job(job_id))
            if stat is not None and stat.version == claim.generation:
                raise NotOwner(f"job {job_id} is owned by {owner}, not {claim.owner}")
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        ops: list[Op] = [Check(self._paths.job(job_id), claim.generation),
                         SetData(self._paths.lock(job_id), data, found[1].version)]
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
