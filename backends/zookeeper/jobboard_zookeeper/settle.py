"""Claiming and settling: each state change is ONE multi-transaction.

* claim   = set_data(job, attempts + 1, version=v) + create(lock, ephemeral) + the flow-control
  gate's ops (:mod:`jobboard_zookeeper.flow`: a check of the limits, a permit); the job's new
  version is the claim's generation (fencing token);
* consume = check(job, generation) + deliver the result to each dependent
  (set_data, or move waiting -> jobs when it was the last dependency) +
  delete(job) [+ create(result)] + delete(lock);
* abandon = check or set_data(job, not_before, version=generation) + delete(lock);
* trash   = check(job, generation) + create(trash) + trash dependents, recursively
  + delete(job) + delete(lock).

Each settle deletes the claim's flow-control permit, if it has one, with its lock.
A cancel (the trash from outside the claim) is :mod:`jobboard_zookeeper.cancel`.

Jobs are deleted before their locks so that watchers never mistake a settle for
a release. A lost reply (:class:`OutcomeUnknown`) is resolved by evidence only that
write leaves: a claim's by its lock holding the claim's nonce, a settle's or a
cancel's by its write marker (:mod:`jobboard_zookeeper.markers`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from anyio import get_cancelled_exc_class

from jobboard.board.codec import decode_posting, encode_posting
from jobboard.errors import (
    BackendUnavailable,
    BoardConflict,
    ClaimLost,
    InvalidJob,
    NotOwner,
)
from jobboard.job import Claim, LastError
from jobboard_zookeeper.flow import Gate, returned
from jobboard_zookeeper.keys import key_settled
from jobboard_zookeeper.layout import LockRecord, Paths, sequence_of
from jobboard_zookeeper.linked import LinkedOps
from jobboard_zookeeper.markers import Marker, Markers
from jobboard_zookeeper.ops import Check, Create, Delete, Op, OutcomeUnknown, SetData, TxnResult
from jobboard_zookeeper.orphans import GivenUp, GivenUpClaims, held_permit, lock_is, release_lock
from jobboard_zookeeper.reading import Stored, read_stored
from jobboard_zookeeper.refusals import lost_claim, why_not
from jobboard_zookeeper.retention import pack_result
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
    key: str | None = None
    """The job's idempotency key: its settle records the outcome there."""
    permit: str | None = None
    """The claim's flow-control permit (:mod:`jobboard_zookeeper.flow`): deleted with its lock."""

    def ends(self, lock: str) -> list[Op]:
        """Delete the claim's lock and its permit, if any (the last ops of a settle)."""
        return [Delete(lock), *returned(self.permit)]


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A settle whose reply was lost and whose marker could not be read back yet."""

    generation: int
    kind: str
    marker: Marker


class Settler:
    """Runs the claim and settle transactions for one board."""

    def __init__(
        self, zk: ZooKeeper, paths: Paths, markers: Markers, *, max_posting_bytes: int, max_request_bytes: int,
    ) -> None:
        self._zk, self._paths, self._markers = zk, paths, markers
        self.max_posting_bytes = max_posting_bytes
        """The largest result (as for postings: ``jute_maxbuffer`` - 4096)."""
        self.max_request_bytes = max_request_bytes
        """The largest transaction the servers accept (a trash record holds a whole posting and more)."""
        self.linked = LinkedOps(zk, paths)
        """Reads jobs and builds the ops that reach their dependents and the trash."""
        self.held: dict[str, Held] = {}
        self.unsettled: dict[str, Unsettled] = {}
        """Settles whose reply was lost and whose outcome was not read back yet, by job."""
        self.lost: dict[str, Held] = {}
        """Claims of a session that expired (or was assumed expired), by job."""
        self.given_up = GivenUpClaims(zk, paths)
        self.on_given_up: Callable[[], object] = lambda: None
        """Called when a release of :attr:`given_up` must start (the board's)."""
        self.permit_returned: Callable[[str, TxnResult], None] = lambda permit, result: None
        """Told a settle that returned a flow-control permit applied (the board's flow follows its count)."""

    def expire(self) -> None:
        """The session is gone: every claim it held is lost."""
        self.lost.update(self.held)
        self.held.clear()

    def lost_reason(self, claim: Claim) -> str | None:
        lost = self.lost.get(claim.job.id)
        return "session expired" if lost is not None and lost.generation == claim.generation else None

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
        # Only this board's claim at this generation tells (generations repeat once a requeue makes a new
        # node); an earlier claim of this board, settled by another board, says nothing of the current one.
        if held is not None and held.generation == claim.generation and LockRecord.decode(lock[0]).nonce != held.nonce:
            return "claimed again"
        return None

    async def release_orphans(self) -> None:
        """After an assumed expiry the session came back: release the claims given up
        (and claims whose reply was lost and never read back: those whose lock is ours)."""
        for job_id, held in list(self.lost.items()):
            if await release_lock(self._zk, self._paths, job_id, held.nonce,
                                  Check(self._paths.job(job_id), held.generation), held.permit):
                logger.info("released orphaned claim of job %s", job_id)
            if self.lost.get(job_id) is held:  # a claim made meanwhile replaced it
                del self.lost[job_id]

    # -- claim -----------------------------------------------------------------

    async def claim(self, job_id: str, stored: Stored, owner: str, gate: Gate) -> Claim | str:
        """Claim a job read at ``stored.version`` through its flow-control ``gate``; on failure, why:
        ``changed``, ``claimed``, ``gone``, ``flow`` (a flow-control node changed meanwhile)."""
        claimed = stored.posting.claimed()
        raw = encode_posting(claimed)
        lock = LockRecord(owner, uuid.uuid4().hex, time.time())
        ops: list[Op] = [SetData(stored.path, raw, stored.version),
                         Create(self._paths.lock(job_id), lock.encode(), ephemeral=True), *gate.ops]
        unheld = Held(owner, stored.version + 1, lock.nonce, raw, permit=gate.permit)  # if nobody gets it
        try:
            won, result = await self._apply_claim(job_id, ops, unheld)
        except get_cancelled_exc_class():  # its caller is gone: release it if it was made
            if self.given_up.add(GivenUp(job_id, stored.path, lock.nonce, stored.version + 1, stored.raw,
                                         gate.permit)):
                self.on_given_up()
            raise
        if not won:
            failure = result.failure() if result is not None else None
            if failure is not None and failure[0] in gate.ops:
                return "flow"
            return why_not(result)
        generation = stored.version + 1
        if result is not None:
            for tell in gate.granted:
                tell(result)
        self.lost.pop(job_id, None)  # whatever this board held of the job before, it is gone
        self.held[job_id] = Held(owner, generation, lock.nonce, raw, stored.num_children > 0, claimed.key,
                                 gate.permit)
        job = claimed.to_job(job_id, sequence_of(job_id))
        return Claim(job, owner, generation, claimed.dependency_results())

    async def _apply_claim(self, job_id: str, ops: list[Op], unheld: Held) -> tuple[bool, TxnResult | None]:
        """Whether the claim multi was applied, and its result (``None``: its reply was lost)."""
        try:
            result = await self._zk.multi(ops)
            return result.ok, result
        except OutcomeUnknown:
            try:
                return await lock_is(self._zk, self._paths, job_id, unheld.nonce), None
            except BackendUnavailable:  # if it was applied, nobody holds it: release it once back
                if (held := self.held.get(job_id)) is None or held.generation != unheld.generation:
                    self.lost[job_id] = unheld  # (not if this board holds that generation: it won)
                raise

    async def exhaust(self, job_id: str, stored: Stored) -> bool:
        """Trash a job that used its attempts (nobody may hold it); True if done."""
        limit = stored.posting.max_attempts
        lock = self._paths.lock(job_id)
        ops: list[Op] = [Check(stored.path, stored.version), Create(lock, ephemeral=True), Delete(lock)]
        ops += await self.linked.trash_ops(job_id, stored, f"{MAX_ATTEMPTS_REASON} ({limit})")
        try:
            return (await self._zk.multi(ops)).ok
        except OutcomeUnknown:
            await self._zk.sync(self._paths.trash(job_id))
            return await self._zk.exists(self._paths.trash(job_id)) is not None

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
        stored = await read_stored(self._zk, self._paths.job(job_id))
        if lock is None or stored is None or stored.version != claim.generation:
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        record = LockRecord.decode(lock[0])
        if record.owner != claim.owner:
            raise NotOwner(f"job {job_id} is owned by {record.owner}, not {claim.owner}")
        return Held(claim.owner, claim.generation, record.nonce, stored.raw, key=stored.posting.key,
                    permit=await held_permit(self._zk, self._paths, job_id, stored.posting.group))

    async def consume(self, claim: Claim, result: Any, raw_result: bytes) -> None:
        """Consume ``claim``; ``raw_result`` is ``result`` encoded (and size-checked) by the board."""
        job_id = claim.job.id
        attempts = 0

        async def build(held: Held) -> list[Op]:
            nonlocal attempts
            attempts += 1
            ops: list[Op] = [Check(self._paths.job(job_id), claim.generation)]
            if held.had_links or attempts > 1:
                ops += await self.linked.delivery_ops(job_id, result)
            ops.append(Delete(self._paths.job(job_id)))
            if claim.job.keep_result:
                ops.append(Create(self._paths.result(job_id), pack_result(raw_result, claim.job.result_ttl)))
            if held.key is not None:
                ops.append(key_settled(self._paths, job_id, held.key, held.posting, trashed=False))
            return [*ops, *held.ends(self._paths.lock(job_id))]

        await self._settle(claim, "consume", build)

    async def abandon(self, claim: Claim, not_before: float | None, error: LastError | None = None) -> None:
        job_id = claim.job.id

        async def build(held: Held) -> list[Op]:
            job, lock = self._paths.job(job_id), self._paths.lock(job_id)
            if not_before is None and error is None:
                return [Check(job, claim.generation), *held.ends(lock)]
            raw = encode_posting(decode_posting(held.posting).delayed(not_before).failed(error))
            return [SetData(job, raw, claim.generation), *held.ends(lock)]

        await self._settle(claim, "abandon", build)

    async def give_back(self, claim: Claim) -> None:
        """An abandon that uncounts the claim's attempt (the posting rewritten at the claim's version)."""
        job_id = claim.job.id

        async def build(held: Held) -> list[Op]:
            posting = decode_posting(held.posting)
            raw = encode_posting(posting.counted(max(0, posting.attempts - 1), None))
            return [SetData(self._paths.job(job_id), raw, claim.generation), *held.ends(self._paths.lock(job_id))]

        await self._settle(claim, "give_back", build)

    async def trash(self, claim: Claim, reason: str, error: LastError | None = None) -> None:
        job_id = claim.job.id
        path = self._paths.job(job_id)

        async def build(held: Held) -> list[Op]:
            posting = decode_posting(held.posting).failed(error)
            raw = held.posting if error is None else encode_posting(posting)
            stored = Stored(path, raw, posting, claim.generation)
            ops = await self.linked.trash_ops(job_id, stored, reason)
            return [*ops, *held.ends(self._paths.lock(job_id))]

        await self._settle(claim, "trash", build)

    async def _settle(self, claim: Claim, kind: str, build: Callable[[Held], Awaitable[list[Op]]]) -> None:
        """Run ``build(held)``'s multi, with a write marker, until it applies.

        A lost reply is resolved by the marker: applied, or certainly not (then
        the multi is built and sent again, and its checks refuse a claim that
        went meanwhile). While the server cannot be asked, the pending marker is
        remembered, so that the caller's retry after ``BackendUnavailable``
        learns the first try's outcome instead of a false ``ClaimLost``.
        """
        job_id = claim.job.id
        if await self._resolved(claim, kind):
            return
        held = await self.current(claim)
        for _ in range(MAX_CONFLICT_RETRIES):
            marker = self._markers.new()
            ops = [*await build(held), marker.create()]
            check_request_size(job_id, ops, self.max_request_bytes)
            try:
                result = await self._zk.multi(ops)
            except OutcomeUnknown:
                self.unsettled[job_id] = Unsettled(claim.generation, kind, marker)
                if await self._resolved(claim, kind):
                    return
                continue
            if result.ok:
                self._markers.done(marker)
                self.held.pop(job_id, None)
                if held.permit is not None:
                    self.permit_returned(held.permit, result)
                return
            self._refuse(result, claim)
        raise BackendUnavailable(
            f"settling job {job_id} failed {MAX_CONFLICT_RETRIES} times (replies lost, or its dependents "
            "changed concurrently each time); try again")

    async def _resolved(self, claim: Claim, kind: str) -> bool:
        """Whether an earlier try of this settle, whose reply was lost, was applied.

        :raises ClaimLost: it was, but it was another kind of settle.
        :raises BackendUnavailable: the server cannot be asked now (still pending).
        """
        pending = self.unsettled.get(claim.job.id)
        if pending is None or pending.generation != claim.generation:
            return False
        applied = await self._markers.applied(pending.marker)
        if self.unsettled.get(claim.job.id) is pending:  # a concurrent settle may have resolved it
            del self.unsettled[claim.job.id]
        if not applied:
            return False
        self.held.pop(claim.job.id, None)
        if pending.kind != kind:
            raise ClaimLost(f"claim of job {claim.job.id} was already settled ({pending.kind})")
        return True

    def _refuse(self, result: TxnResult, claim: Claim) -> None:
        """After a failed settle multi: raise unless only a dependent conflicted (then retry).

        :raises ClaimLost: the claim itself is not current.
        :raises BoardConflict: a node the settle must create exists already, or a
            key it must update is gone: retrying cannot help.
        """
        job_id = claim.job.id
        failure = result.failure()
        if failure is None or lost_claim(failure, self._paths, job_id):
            self.held.pop(job_id, None)
            raise ClaimLost(f"claim of job {job_id} (generation {claim.generation}) is no longer current")
        op, error = failure
        if error == "NodeExists" or op.path.startswith(self._paths.dir("keys")):
            raise BoardConflict(f"settling job {job_id}: ZooKeeper {error} on {op.path}; the board holds "
                                "a node this settle must write (left by another tool or a bug)")


def check_request_size(job_id: str, ops: list[Op], limit: int) -> None:
    """:raises InvalidJob: the transaction would exceed what the server accepts (``limit``: jute.maxbuffer)."""
    size = sum(len(op.path) + len(getattr(op, "data", b"")) + OP_OVERHEAD for op in ops)
    if size > limit:
        raise InvalidJob(
            f"settling job {job_id} needs a {size}-byte transaction, over this board's limit of "
            f"{limit} bytes (jute_maxbuffer): the result is too large for "
            f"{'the job and its dependents' if len(ops) > 4 else 'the board'}; store it elsewhere")
