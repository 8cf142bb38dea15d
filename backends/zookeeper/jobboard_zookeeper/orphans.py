"""Claims nobody stands behind: made by a call whose caller gave up (cancelled) before its reply.

Such a claim may or may not have been applied. If its lock holds the claim's nonce (read after a
sync, so a lagging follower cannot hide it), the job is put back as it was before the claim (the
attempt uncounted) and the lock deleted, in one multi checked at the claim's generation; else
nothing was claimed. One release runs at a time per board and takes every claim given up so far.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobboard.board.codec import MalformedEntry
from jobboard.errors import BackendUnavailable
from jobboard_zookeeper.flow import returned
from jobboard_zookeeper.layout import LockRecord, Paths
from jobboard_zookeeper.ops import Delete, Op, SetData
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)


async def lock_is(zk: ZooKeeper, paths: Paths, job_id: str, nonce: str) -> bool:
    """Whether the job's lock holds this claim's nonce (read after a sync)."""
    path = paths.lock(job_id)
    await zk.sync(path)
    found = await zk.get(path)
    try:
        return found is not None and LockRecord.decode(found[0]).nonce == nonce
    except MalformedEntry:
        return False


async def release_lock(zk: ZooKeeper, paths: Paths, job_id: str, nonce: str, guard: Op,
                       permit: str | None = None) -> bool:
    """Delete the job's lock (and the claim's flow-control ``permit``) if it holds ``nonce``, in one multi
    with ``guard`` (an op on the job node at the claim's generation); True if released."""
    if not await lock_is(zk, paths, job_id, nonce):
        return False
    return (await zk.multi([guard, Delete(paths.lock(job_id)), *returned(permit)], retry_safe=True)).ok


async def held_permit(zk: ZooKeeper, paths: Paths, job_id: str, group: str | None) -> str | None:
    """The flow-control permit of the current claim of ``job_id`` if it has one (read: a claim made by
    another board object). Permits are named by their job, and a job has one live claim at most."""
    if group is None:
        return None
    path = paths.permit(group, job_id)
    return path if await zk.exists(path) is not None else None


@dataclass(frozen=True, slots=True)
class GivenUp:
    """A claim whose caller gave up before its reply."""

    job_id: str
    path: str
    """The job node the claim wrote."""
    nonce: str
    generation: int
    """The job node's version if the claim was applied."""
    posting: bytes
    """The job node's data before the claim."""
    permit: str | None = None
    """The claim's flow-control permit, if it took one."""


class GivenUpClaims:
    """The claims given up on one board, released in the background (see the module docstring)."""

    def __init__(self, zk: ZooKeeper, paths: Paths) -> None:
        self._zk, self._paths = zk, paths
        self.pending: dict[tuple[str, str], GivenUp] = {}
        self.releasing = False

    def add(self, claim: GivenUp) -> bool:
        """Remember ``claim``; True if a release must be started (none is running)."""
        self.pending[claim.job_id, claim.nonce] = claim
        return not self.releasing

    async def release(self) -> None:
        """Release every pending claim that was applied. One that cannot be checked (the servers
        are away) stays pending: retried after the reconnect, and its lock dies with the session.

        :raises BackendUnavailable: as the reads and the multi.
        """
        if self.releasing:
            return
        self.releasing = True
        try:
            while self.pending:
                key, claim = next(iter(self.pending.items()))
                put_back = SetData(claim.path, claim.posting, claim.generation)
                if await release_lock(self._zk, self._paths, claim.job_id, claim.nonce, put_back, claim.permit):
                    logger.info("released job %s, claimed by a call given up before its reply", claim.job_id)
                self.pending.pop(key, None)  # (cleared meanwhile if the session was replaced)
        except BackendUnavailable as error:
            logger.warning("could not release a claim given up before its reply (retried after a reconnect): %s",
                           error)
        finally:
            self.releasing = False
