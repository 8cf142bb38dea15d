"""Cancelling a claimed job: trash it and revoke its claim in ONE multi-transaction.

``cancel_claimed`` = check(job, version read) + create(trash) + trash dependents
+ delete(job) + delete(lock). The job's version moves with every claim, so an
unchanged version means the lock present is the one of the claim read; if the
owner settled or released meanwhile, the transaction fails and the caller reads
again. The owner's board sees the job and lock go (``watch_claim`` returns
``trashed``) and its later settle raises ``ClaimLost``.
"""

from __future__ import annotations

from jobboard_zookeeper.layout import TrashRecord
from jobboard_zookeeper.ops import Delete, Op, OutcomeUnknown
from jobboard_zookeeper.settle import Settler, Stored


async def cancel_claimed(settler: Settler, job_id: str, stored: Stored, reason: str) -> str | None:
    """Trash a claimed job, revoking the claim; ``None`` if done, else ``changed``."""
    paths = settler._paths
    ops: list[Op] = await settler._trash_ops(job_id, stored, reason)
    ops.append(Delete(paths.lock(job_id)))
    try:
        result = await settler._zk.multi(ops)
    except OutcomeUnknown:
        found = await settler._zk.get(paths.trash(job_id))
        return None if found is not None and TrashRecord.decode(found[0]).reason == reason else "changed"
    return None if result.ok else "changed"
