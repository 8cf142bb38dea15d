"""Cancelling a job on ZooKeeper: to the trash with its dependents, its claim revoked (:class:`Canceller`).

One multi: the trash operations of the job and, recursively, of its dependents
(:meth:`LinkedOps.trash_ops <jobboard_zookeeper.linked.LinkedOps.trash_ops>`, each checked at the
version read), a write marker, and either ``create`` + ``delete`` of the lock (nobody may hold
the job meanwhile) or, once it is found held, ``delete(lock)`` after the job (watchers see a
trash, not a release) with the claim's flow-control permit, if it has one. Retried from a fresh read when the job changed meanwhile. A lost reply is
resolved by the marker, now or by the caller's retry.
"""

from __future__ import annotations

from jobboard.errors import BackendUnavailable, BoardConflict
from jobboard_zookeeper.flow import returned
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.linked import LinkedOps
from jobboard_zookeeper.markers import Marker, Markers
from jobboard_zookeeper.ops import Create, Delete, OutcomeUnknown
from jobboard_zookeeper.orphans import held_permit
from jobboard_zookeeper.reading import Reader, Stored
from jobboard_zookeeper.refusals import not_found
from jobboard_zookeeper.settle import check_request_size
from jobboard_zookeeper.zk import ZooKeeper

CANCEL_RETRIES = 5


class Canceller:
    """Cancels jobs for one board (see the module docstring)."""

    def __init__(self, zk: ZooKeeper, paths: Paths, markers: Markers, linked: LinkedOps, reader: Reader,
                 max_request_bytes: int) -> None:
        self._zk, self._paths, self._markers, self._linked = zk, paths, markers, linked
        self._reader, self._max_request_bytes = reader, max_request_bytes
        self.unsettled: dict[str, Marker] = {}
        """Cancels whose reply was lost and whose outcome was not read back yet, by job."""

    async def cancel(self, job_id: str, reason: str) -> None:
        """:raises JobNotFound: not on the board. :raises BackendUnavailable: it kept changing meanwhile.
        :raises BoardConflict: a node the cancel must create exists already."""
        for _ in range(CANCEL_RETRIES):
            stored = await self._reader.stored(job_id)
            if await self.cancelled_before(job_id):
                return  # a first try, whose reply was lost, was applied
            if stored is None:
                raise not_found(job_id)
            if await self._trash(job_id, stored, reason) is None:
                return
        raise BackendUnavailable(f"cancelling job {job_id} kept conflicting with concurrent changes")

    async def _trash(self, job_id: str, stored: Stored, reason: str) -> str | None:
        """Trash a job and revoke its claim if it has one; ``None`` if done, else ``changed``.

        First as for a job nobody holds (``create`` + ``delete`` of the lock proves it);
        if it is held, again with ``delete(lock)``: the job's version (checked by the
        trash operations) moves with every claim, so the lock deleted is the one of the
        claim that held the job when it was read. The owner's ``watch_claim`` returns
        and its settle raises ``ClaimLost``.
        """
        outcome = await self._attempt(job_id, stored, reason, revoke=False)
        if outcome == "claimed":
            outcome = await self._attempt(job_id, stored, reason, revoke=True)
        return outcome

    async def cancelled_before(self, job_id: str) -> bool:
        """Whether an earlier cancel of the job, whose reply was lost, was applied.

        :raises BackendUnavailable: the server cannot be asked now (still pending).
        """
        marker = self.unsettled.get(job_id)
        if marker is None:
            return False
        applied = await self._markers.applied(marker)
        self.unsettled.pop(job_id, None)
        return applied

    async def _attempt(self, job_id: str, stored: Stored, reason: str, *, revoke: bool) -> str | None:
        lock = self._paths.lock(job_id)
        ops = await self._linked.trash_ops(job_id, stored, reason)
        if revoke:
            ops.append(Delete(lock))  # after the job, so that watchers see a trash, not a release
            permit = await held_permit(self._zk, self._paths, job_id, stored.posting.group)
            ops += returned(permit)  # the claim's flow-control permit goes with it
        elif stored.path == self._paths.job(job_id):  # nobody may hold it meanwhile
            ops[:0] = [Create(lock, ephemeral=True), Delete(lock)]
        marker = self._markers.new()
        ops.append(marker.create())
        check_request_size(job_id, ops, self._max_request_bytes)
        try:
            result = await self._zk.multi(ops)
        except OutcomeUnknown:
            self.unsettled[job_id] = marker  # resolved here, or by the caller's retry
            return None if await self.cancelled_before(job_id) else "changed"
        if result.ok:
            self._markers.done(marker)
            return None
        failure = result.failure()
        if failure is None or failure[1] != "NodeExists":
            return "changed"
        if failure[0] == ops[0] and not revoke:
            return "claimed"
        raise BoardConflict(f"cancelling job {job_id}: ZooKeeper NodeExists on {failure[0].path}; the board "
                            "holds a node the cancel must write (left by another tool or a bug)")
