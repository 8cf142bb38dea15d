"""Claiming and settling: each state change is ONE multi-transaction.

* claim   = set_data(job, attempts + 1, version=v) + create(lock, ephemeral);
  the job's new version is the claim's generation (fencing token);
* consume = check(job, generation) + deliver the result to each dependent
  (set_data, or move waiting -> jobs when it was the last dependency) +
  delete(job) [+ create(result)] + delete(lock);
* abandon = check or set_data(job, not_before, version=generation) + delete(lock);
* trash   = check(job, generation) + create(trash) + trash dependents, recursively
  + delete(job) + delete(lock).

Jobs are deleted before their locks so that watchers never mistake a settle for
a release. A lost reply (:class:`OutcomeUnknown`) is resolved by reading back.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jobboard.codec import MalformedEntry, Posting, decode_posting, encode_posting, encode_value
from jobboard.errors import BackendUnavailable, ClaimLost, InvalidJob, JobNotFound, NotOwner
from jobboard.job import Claim, LastError
from jobboard_zookeeper.layout import LockRecord, Paths, TrashRecord, sequence_of
from jobboard_zookeeper.ops import Check, Create, Delete, Op, OutcomeUnknown, SetData, TxnResult
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 20
OP_OVERHEAD = 32
"""Bytes a multi spends on each operation besides its path and data (header, version, ACL)."""
MAX_ATTEMPTS_REASON = "max attempts exceeded"


@dataclass(frozen=True, slots=True)
class Held:
    """What this board remembers of a claim it made."""

    owner: str
    generation: int
    nonce: str
    posting: bytes
    had_links: bool = True
    """Whether the job had dependents when claimed: if not, consume skips listing them
    (a dependent posted since makes ``delete(job)`` fail with NotEmpty and the settle retry)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A job node as read: where, its bytes, its decoded posting and version."""

    path: str
    raw: bytes
    posting: Posting
    version: int
    num_children: int = 0


class Settler:
    """Runs the claim and settle transactions for one board."""

    def __init__(self, zk: ZooKeeper, paths: Paths, max_posting_bytes: int) -> None:
        self._zk, self._paths = zk, paths
        self.max_posting_bytes = max_posting_bytes
        self.held: dict[str, Held] = {}
        self.unsettled: dict[str, int] = {}
        """Claims (job -> generation) whose last settle's reply was lost, outcome not read back yet."""
        self.lost: dict[str, Held] = {}
        """Claims of a session that expired (or was assumed expired), by job."""

    def expire(self) -> None:
        """The session is gone: every claim it held is lost."""
        self.lost.update(self.held)
        self.held.clear()

    def lost_reason(self, claim: Claim) -> str | None:
        lost = self.lost.get(claim.job.id)
        if lost is not None and lost.generation == claim.generation:
            return "session expired"
        return None

    async def why_lost(self, claim: Claim) -> str | None:
        """Read whether ``claim`` is still current: ``None`` if it is, else why not."""
        job_id = claim.job.id
        lock = await self._zk.get(self._paths.lock(job_id))
        stat = await self._zk.exists(self._paths.job(job_id))
        if stat is None:
            return "trashed" if await self._zk.exists(self._paths.trash(job_id)) else "consumed"
        if stat.version != claim.generation:
            return "claimed again"
        if lock is None:
            return "released"
        held = self.held.get(job_id)
        if held is not None and LockRecord.decode(lock[0]).nonce != held.nonce:
            return "claimed again"
        return None

    async def release_orphans(self) -> None:
        """After an assumed expiry the session came back: release the claims given up."""
        for job_id, held in list(self.lost.items()):
            ops: list[Op] = [Check(self._paths.job(job_id), held.generation), Delete(self._paths.lock(job_id))]
            if (await self._zk.multi(ops, retry_safe=True)).ok:
                logger.info("released orphaned claim of job %s", job_id)
            del self.lost[job_id]

    async def read(self, path: str) -> Stored | None:
        """:raises MalformedEntry: the node holds no valid posting."""
        found = await self._zk.get(path)
        if found is None:
            return None
        raw, stat = found
        return Stored(path, raw, decode_posting(raw), stat.version, stat.num_children)

    # -- claim -----------------------------------------------------------------

    async def claim(self, job_id: str, stored: Stored, owner: str) -> Claim | str:
        """Claim a job read at ``stored.version``; on failure, why: ``changed``, ``claimed``, ``gone``."""
        claimed = stored.posting.claimed()
        raw = encode_posting(claimed)
        lock = LockRecord(owner, uuid.uuid4().hex, time.time())
        ops: list[Op] = [SetData(stored.path, raw, stored.version),
                         Create(self._paths.lock(job_id), lock.encode(), ephemeral=True)]
        try:
            result = await self._zk.multi(ops)
            won = result.ok
        except OutcomeUnknown:
            won = await self._lock_is(job_id, lock.nonce)
            result = None
        if not won:
            return _why_not(result)
        generation = stored.version + 1
        self.held[job_id] = Held(owner, generation, lock.nonce, raw, stored.num_children > 0)
        job = claimed.to_job(job_id, sequence_of(job_id))
        return Claim(job, owner, generation, claimed.dependency_results())

    async def _lock_is(self, job_id: str, nonce: str) -> bool:
        found = await self._zk.get(self._paths.lock(job_id))
        try:
            return found is not None and LockRecord.decode(found[0]).nonce == nonce
        except MalformedEntry:
            return False

    async def exhaust(self, job_id: str, stored: Stored) -> bool:
        """Trash a job that used its attempts (nobody may hold it); True if done."""
        limit = stored.posting.max_attempts
        lock = self._paths.lock(job_id)
        ops: list[Op] = [Check(stored.path, stored.version), Create(lock, ephemeral=True), Delete(lock)]
        ops += await self._trash_ops(job_id, stored, f"{MAX_ATTEMPTS_REASON} ({limit})")
        try:
            return (await self._zk.multi(ops)).ok
        except OutcomeUnknown:
            return await self._zk.exists(self._paths.trash(job_id)) is not None

    async def cancel(self, job_id: str, stored: Stored, reason: str) -> str | None:
        """Trash a job nobody holds; ``None`` if done, else ``claimed`` or ``changed``."""
        ops: list[Op] = []
        if stored.path == self._paths.job(job_id):  # nobody may hold it meanwhile
            lock = self._paths.lock(job_id)
            ops += [Create(lock, ephemeral=True), Delete(lock)]
        ops += await self._trash_ops(job_id, stored, reason)
        try:
            result = await self._zk.multi(ops)
        except OutcomeUnknown:
            return None if await self._zk.exists(self._paths.trash(job_id)) else "changed"
        failure = result.failure()
        if failure is None:
            return None
        return "claimed" if failure[0] == ops[0] and failure[1] == "NodeExists" else "changed"

    # -- settling ----------------------------------------------------------------

    async def current(self, claim: Claim) -> Held:
        """What this board holds for ``claim`` (read from ZooKeeper if another board claimed it).

        :raises NotOwner: the lock's owner is not the claim's (same generation).
        :raises ClaimLost: the claim is not current.
        """
        job_id = claim.job.id
        held = self.held.get(job_id)
        if held is not None and held.generation == claim.generation and held.owner == claim.owner:
            return held
        lock = await self._zk.get(self._paths.lock(job_id))
        stored = await self.read(self._paths.job(job_id))
        if lock is None or stored is None or stored.version != claim.generation:
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        record = LockRecord.decode(lock[0])
        if record.owner != claim.owner:
            raise NotOwner(f"job {job_id} is owned by {record.owner}, not {claim.owner}")
        return Held(claim.owner, claim.generation, record.nonce, stored.raw)

    async def consume(self, claim: Claim, result: Any) -> None:
        job_id = claim.job.id
        raw_result = encode_value(result, what=f"result of job {job_id}")
        held = await self.current(claim)

        attempts = 0

        async def build() -> list[Op]:
            nonlocal attempts
            attempts += 1
            ops: list[Op] = [Check(self._paths.job(job_id), claim.generation)]
            if held.had_links or attempts > 1:
                ops += await self._delivery_ops(job_id, result)
            ops.append(Delete(self._paths.job(job_id)))
            if claim.job.keep_result:
                ops.append(Create(self._paths.result(job_id), raw_result))
            return [*ops, Delete(self._paths.lock(job_id))]

        await self._settle(claim, held, build, applied=self._consumed(claim))

    async def abandon(self, claim: Claim, not_before: float | None, error: LastError | None = None) -> None:
        job_id = claim.job.id
        held = await self.current(claim)

        async def build() -> list[Op]:
            job, lock = self._paths.job(job_id), self._paths.lock(job_id)
            if not_before is None and error is None:
                return [Check(job, claim.generation), Delete(lock)]
            raw = encode_posting(decode_posting(held.posting).delayed(not_before).failed(error))
            return [SetData(job, raw, claim.generation), Delete(lock)]

        await self._settle(claim, held, build, applied=self._lock_not(job_id, held.nonce))

    async def trash(self, claim: Claim, reason: str, error: LastError | None = None) -> None:
        job_id = claim.job.id
        held = await self.current(claim)
        path = self._paths.job(job_id)

        async def build() -> list[Op]:
            posting = decode_posting(held.posting).failed(error)
            raw = held.posting if error is None else encode_posting(posting)
            stored = Stored(path, raw, posting, claim.generation)
            ops = await self._trash_ops(job_id, stored, reason)
            return [*ops, Delete(self._paths.lock(job_id))]

        await self._settle(claim, held, build, applied=self._trashed(claim, reason))

    async def _settle(
        self, claim: Claim, held: Held, build: Callable[[], Awaitable[list[Op]]],
        applied: Callable[[], Awaitable[bool]],
    ) -> None:
        """Run ``build()``'s multi until it applies; retry when only a dependent conflicted.

        A settle whose reply was lost is remembered until its outcome is read back,
        so that a caller retrying after ``BackendUnavailable`` gets the first
        attempt's success instead of ``ClaimLost``.
        """
        job_id = claim.job.id
        if self.unsettled.get(job_id) == claim.generation and await applied():
            self.unsettled.pop(job_id, None)
            self.held.pop(job_id, None)
            return
        for _ in range(MAX_CONFLICT_RETRIES):
            ops = await build()
            self._check_request_size(job_id, ops)
            try:
                result = await self._zk.multi(ops)
            except OutcomeUnknown:
                self.unsettled[job_id] = claim.generation
                if await applied():
                    self.unsettled.pop(job_id, None)
                    self.held.pop(job_id, None)
                    return
                self.unsettled.pop(job_id, None)
                await self.current(claim)
                continue
            if result.ok:
                self.held.pop(job_id, None)
                return
            if _lost_claim(result, self._paths, job_id):
                self.held.pop(job_id, None)
                raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        raise BackendUnavailable(f"settling job {job_id} kept conflicting with concurrent changes")

    def _check_request_size(self, job_id: str, ops: list[Op]) -> None:
        """:raises InvalidJob: the transaction would exceed what the server accepts (jute.maxbuffer)."""
        size = sum(len(op.path) + len(getattr(op, "data", b"")) + OP_OVERHEAD for op in ops)
        if size > self.max_posting_bytes:
            raise InvalidJob(
                f"settling job {job_id} needs a {size}-byte transaction, over this board's limit of "
                f"{self.max_posting_bytes} bytes (jute_maxbuffer): the result is too large for "
                f"{'the job and its dependents' if len(ops) > 4 else 'the board'}; store it elsewhere")

    def _consumed(self, claim: Claim) -> Callable[[], Awaitable[bool]]:
        """After a lost reply: gone, not trashed, and our session never lost the claim."""
        job_id = claim.job.id

        async def check() -> bool:
            if self.lost_reason(claim) is not None:
                return False  # someone else may have settled it: ClaimLost follows
            gone = await self._zk.exists(self._paths.job(job_id)) is None
            return gone and await self._zk.exists(self._paths.trash(job_id)) is None
        return check

    def _trashed(self, claim: Claim, reason: str) -> Callable[[], Awaitable[bool]]:
        """After a lost reply: in the trash with our reason, and our session never lost the claim."""
        async def check() -> bool:
            found = await self._zk.get(self._paths.trash(claim.job.id))
            if found is None or self.lost_reason(claim) is not None:
                return False
            return TrashRecord.decode(found[0]).reason == reason
        return check

    def _lock_not(self, job_id: str, nonce: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return not await self._lock_is(job_id, nonce)
        return check

    # -- linked jobs -------------------------------------------------------------

    async def _delivery_ops(self, job_id: str, result: Any) -> list[Op]:
        """Deliver ``result`` to every dependent; release those it was the last dependency of."""
        job_path = self._paths.job(job_id)
        links = await self._links(job_path)
        dependents = await asyncio.gather(*(self._read_quietly(self._paths.waiting(d)) for d in links))
        parts = await asyncio.gather(*(self._deliver_to(job_id, dependent, result)
                                       for dependent in dependents if dependent is not None))
        ops: list[Op] = [Delete(f"{job_path}/{dependent_id}") for dependent_id in links]
        return ops + [op for part in parts for op in part]  # None: trashed with another dependency

    async def _deliver_to(self, job_id: str, dependent: Stored, result: Any) -> list[Op]:
        posting = dependent.posting.with_result(job_id, result)
        raw = encode_posting(posting)
        if posting.waiting_on:
            return [SetData(dependent.path, raw, dependent.version)]
        return await self._release_ops(dependent.path.rsplit("/", 1)[1], dependent, raw)

    async def _release_ops(self, job_id: str, waiting: Stored, raw: bytes) -> list[Op]:
        """Move a waiting job (with its own links) to ``jobs/``."""
        links = await self._links(waiting.path)
        ops: list[Op] = [Delete(f"{waiting.path}/{link}") for link in links]
        ops += [Delete(waiting.path, waiting.version), Create(self._paths.job(job_id), raw)]
        return ops + [Create(f"{self._paths.job(job_id)}/{link}") for link in links]

    async def _trash_ops(self, job_id: str, stored: Stored, reason: str) -> list[Op]:
        """Trash one job and, recursively, its dependents (without its lock)."""
        ops: list[Op] = [Check(stored.path, stored.version),
                         Create(self._paths.trash(job_id), TrashRecord.now(stored.raw, reason).encode())]
        for dependent_id in await self._links(stored.path):
            ops.append(Delete(f"{stored.path}/{dependent_id}"))
            dependent = await self._read_quietly(self._paths.waiting(dependent_id))
            if dependent is not None:
                cause = f"dependency {job_id} ({stored.posting.name}) was trashed: {reason}"
                ops += await self._trash_ops(dependent_id, dependent, cause)
        return [*ops, Delete(stored.path, stored.version)]

    async def _links(self, path: str) -> list[str]:
        children = await self._zk.children(path)
        return sorted(children[0]) if children else []

    async def _read_quietly(self, path: str) -> Stored | None:
        try:
            return await self.read(path)
        except MalformedEntry:
            logger.warning("malformed waiting job at %s is left alone", path)
            return None


def _why_not(result: TxnResult | None) -> str:
    failure = result.failure() if result else None
    if failure is None:
        return "lost"
    op, error = failure
    if isinstance(op, Create) and error == "NodeExists":
        return "claimed"
    return "gone" if error == "NoNode" else "changed"


def _lost_claim(result: TxnResult, paths: Paths, job_id: str) -> bool:
    """Whether a failed settle failed on the claim itself (not on a dependent)."""
    failure = result.failure()
    if failure is None:
        return True
    op, error = failure
    if op.path == paths.lock(job_id):
        return True
    return op.path == paths.job(job_id) and error in ("BadVersion", "NoNode")


def not_found(job_id: str) -> JobNotFound:
    return JobNotFound(f"job {job_id} is not on the board")
