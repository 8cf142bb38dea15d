"""Time on a ``memory://`` board: progress of running jobs, retention, purge and requeue.

Like the store's own methods these never await, so each is atomic on its event loop.
Expired results and trash entries are dropped by :func:`sweep`, which the board runs
when it is used (at most once a second for writes, at every read of the trash or of
an outcome), so nothing expired is ever shown and nothing piles up.
"""

from __future__ import annotations

import time

from jobboard.board.events import Event, EventKind
from jobboard.errors import InvalidJob, JobNotFound
from jobboard.job import Claim, Job, Progress
from jobboard_memory.store import KeyRecord, Store

SWEEP_INTERVAL = 1.0
"""Seconds between two sweeps triggered by writes (the board keeps the time of the next)."""


def expired(stored_at: float, own_ttl: float | None, board_ttl: float, now: float) -> bool:
    """Whether something stored at ``stored_at`` is past its time to live (0: never)."""
    ttl = board_ttl if own_ttl is None else own_ttl
    return ttl > 0 and now - stored_at >= ttl


class Keeper:
    """The retention rules of one board (its own ``result_ttl`` and ``trash_ttl``) on a store."""

    def __init__(self, result_ttl: float, trash_ttl: float) -> None:
        self.result_ttl, self.trash_ttl = result_ttl, trash_ttl

    def sweep(self, store: Store) -> int:
        """Drop expired kept results and trash entries; return how many were dropped."""
        now = time.time()
        results = [job_id for job_id, (at, ttl) in store.kept_at.items() if expired(at, ttl, self.result_ttl, now)]
        for job_id in results:
            del store.kept_at[job_id]
            store.kept_results.pop(job_id, None)
        trash = [job_id for job_id, item in store.trash.items()
                 if expired(item.trashed_at, item.job.trash_ttl, self.trash_ttl, now)]
        for job_id in trash:
            drop_trashed(store, job_id)
        return len(results) + len(trash)

    def expire(self, store: Store, job_id: str) -> None:
        """Drop one job's kept result or trash entry if it expired (``wait_for_completion``: O(1))."""
        now = time.time()
        kept = store.kept_at.get(job_id)
        if kept is not None and expired(*kept, self.result_ttl, now):
            del store.kept_at[job_id]
            store.kept_results.pop(job_id, None)
        item = store.trash.get(job_id)
        if item is not None and expired(item.trashed_at, item.job.trash_ttl, self.trash_ttl, now):
            drop_trashed(store, job_id)


def drop_trashed(store: Store, job_id: str) -> None:
    """Remove a trash entry, and the key that finds it (a purged job is forgotten)."""
    del store.trash[job_id]
    entry = store.trashed_entries.pop(job_id, None)
    key = entry.posting.key if entry is not None else None
    if key is not None and (record := store.keys.get(key)) is not None and record.job_id == job_id:
        del store.keys[key]
        store._settled_keys.pop(key, None)


def report_progress(store: Store, claim: Claim, progress: Progress) -> None:
    """Store ``progress`` with the claim. :raises ClaimLost: / :raises NotOwner: as a settle."""
    entry = store.current(claim)
    entry.progress = (entry.generation, progress)


def purge(store: Store, older_than: float) -> int:
    """Remove trash entries trashed at least ``older_than`` seconds ago."""
    now = time.time()
    old = [job_id for job_id, item in store.trash.items() if now - item.trashed_at >= older_than]
    for job_id in old:
        drop_trashed(store, job_id)
    return len(old)


def requeue(store: Store, job_id: str, reset_attempts: bool) -> Job:
    """Put a trashed job back, unclaimed, with its id and place (see ``JobBoard.requeue``)."""
    entry = store.trashed_entries.get(job_id)
    if entry is None or job_id not in store.trash:
        raise JobNotFound(f"job {job_id} is not in the trash")
    if entry.waiting_on:
        raise InvalidJob(f"job {job_id} waits for {', '.join(sorted(entry.waiting_on))}, whose result never "
                         "came (it was trashed with a dependency): post it again instead")
    drop_trashed(store, job_id)  # (and its key, given back below)
    posting = entry.posting.delayed(None)
    if reset_attempts:
        posting = posting.reset_attempts()
    key = posting.key
    if key is not None:
        record = store.keys.get(key)
        if record is not None and record.job_id != job_id:
            posting = posting.without_key()  # the key found another job since
        else:
            store.keys[key] = KeyRecord(job_id)
            store._settled_keys.pop(key, None)
    entry.posting, entry.owner, entry.holder = posting, None, None
    entry.dependents, entry.progress = [], None
    store.jobs[job_id] = entry
    if posting.group is not None:
        store.flow.joined(entry)
    store._make_ready(entry)
    store._publish(Event(EventKind.POSTED, job_id, posting.name))
    return entry.job()
