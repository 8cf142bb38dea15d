"""``memory://name``: the embedded reference backend.

Boards opened on the same name in one process share one :class:`Store`; a
board's claims and entities behave like a remote session's: closing the board
releases them. ``memory://`` without a name is a private board.

Flow control (limits per group, pauses) is implemented: see :mod:`jobboard_memory.flow`.

URL options: ``max_attempts`` (default for posts), ``max_posting_bytes``,
``key_retention`` (seconds a settled job's idempotency key keeps finding it),
``result_ttl`` and ``trash_ttl`` (seconds kept results and trashed jobs stay; 0: forever).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import anyio

from jobboard.backend import (
    COMMON_OPTIONS,
    Backend,
    Claim,
    DependencyMissing,
    Entity,
    Event,
    GroupLimit,
    Job,
    JobState,
    LimitSpec,
    ListedJob,
    MalformedEntry,
    Outcome,
    Paused,
    Prepared,
    Progress,
    Settle,
    SettleAction,
    TrashedJob,
    parse_options,
    parse_url,
)
from jobboard.board.contract import JobBoard
from jobboard_memory import keep
from jobboard_memory.keep import SWEEP_INTERVAL, Keeper
from jobboard_memory.store import Store, wall_clock

logger = logging.getLogger(__name__)


class SharedState:
    """A store plus what the boards sharing it need to see each other."""

    def __init__(self) -> None:
        self.boards: set[MemoryBackend] = set()
        self.store = Store(self.publish)
        self.entities: dict[str, tuple[Entity, MemoryBackend]] = {}
        self._waiters: list[anyio.Event] = []

    def publish(self, event: Event) -> None:
        for board in self.boards:
            board.hub.publish(event)
        self.notify()

    def notify(self) -> None:
        """Wake everything waiting for a change."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()

    def change(self) -> anyio.Event:
        """An event set at the next change; take it *before* checking a condition."""
        waiter = anyio.Event()
        self._waiters.append(waiter)
        return waiter


_SHARED: dict[str, SharedState] = {}


class MemoryBackend(Backend):
    """In-process job board; see the module docstring."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parsed = parse_url(url)
        self.use_options(parse_options(parsed, COMMON_OPTIONS))
        self._keeper = Keeper(self.result_ttl, self.trash_ttl)
        self._next_sweep = 0.0
        """When (``time.monotonic()``) a write next sweeps expired results and trash: at most once a second."""
        self._name = (parsed.host_string + parsed.path) or f"private-{uuid.uuid4().hex}"

    @property
    def _shared(self) -> SharedState:
        self.ensure_open()
        return _SHARED[self._name]

    @property
    def _store(self) -> Store:
        return self._shared.store

    async def open(self) -> None:
        shared = _SHARED.setdefault(self._name, SharedState())
        shared.boards.add(self)
        self._open = True

    async def aclose(self) -> None:
        if not self._open:
            return
        shared = self._shared
        for entry in shared.store.held_by(self):
            shared.store.release(entry, None, f"owner {entry.owner} closed its board")
        for name in [n for n, (_, board) in shared.entities.items() if board is self]:
            del shared.entities[name]
        shared.boards.discard(self)
        self.hub.close()
        self._open = False
        shared.notify()

    async def post(self, prepared: Prepared) -> Job:
        store = self._swept_store()
        existing = store.keyed(prepared.posting.key, self.key_retention)
        return existing if existing is not None else store.admit(prepared.raw, prepared.posting)

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """Each posting as by :meth:`post`, without awaiting between them (atomic on the event loop, as a
        whole: the batch is admitted in one step). :raises DependencyMissing: with ``index`` and ``posted``."""
        store = self._swept_store()
        store.keyed(None, self.key_retention)  # drops the keys settled too long ago, once for the batch
        posted: list[Job] = []
        for index, prepared in enumerate(batch):
            key = prepared.posting.key
            existing = None if key is None else store.keyed(key, self.key_retention)
            try:
                posted.append(existing if existing is not None else store.admit(prepared.raw, prepared.posting))
            except DependencyMissing as error:
                raise error.in_batch(index, posted) from None
        return posted

    def _swept_store(self) -> Store:
        """The store, after sweeping its expired results and trash if the last sweep is a second old."""
        store = self._store
        if (now := time.monotonic()) >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL
            self._keeper.sweep(store)
        return store

    async def get(self, job_id: str) -> Job:
        return self._store.entry(job_id).job()

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        self._report_store_malformed()
        for entry in self._store.ordered():
            if not only_unclaimed or entry.state() is JobState.UNCLAIMED:
                yield entry.job()

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        self._report_store_malformed()
        for entry in self._store.ordered():
            state = entry.state()
            if not only_unclaimed or state is JobState.UNCLAIMED:
                yield ListedJob(entry.job(), state, entry.owner if state is JobState.CLAIMED else None)

    def _report_store_malformed(self) -> None:
        for job_id in self._store.malformed.keys() - self.services.reported:
            self.report_malformed(job_id)

    async def state(self, job_id: str) -> JobState:
        self._keeper.expire(self._store, job_id)
        return self._store.state(job_id)

    async def owner(self, job_id: str) -> str | None:
        entry = self._store.jobs.get(job_id)
        return entry.owner if entry is not None else None

    async def job_count(self) -> int:
        return len(self._store.jobs)

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        self._keeper.sweep(self._store)
        for item in list(self._store.trash.values()):
            yield item

    async def claim(self, job_id: str, owner: str) -> Claim:
        return self._store.claim(job_id, owner, self, wall_clock())

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        self._report_store_malformed()
        if not self._store.flow.active:
            return self._store.claim_next(owner, self, wall_clock(), names)
        whys: set[str] = set()
        claim = self._store.claim_next(owner, self, wall_clock(), names, whys)
        if whys:
            self.passed_over(whys)
        return claim

    @property
    def reports_held_back(self) -> bool:
        return True

    async def watch_claim(self, claim: Claim) -> str:
        while True:
            if not self._open:
                return "board closed"
            change = self._shared.change()
            reason = self._store.lost_because(claim)
            if reason is not None:
                return reason
            await change.wait()

    async def settle(self, claim: Claim, settle: Settle) -> None:
        store = self._store
        if settle.action is SettleAction.CONSUME:
            store.consume(claim, settle.encoded_result)
            return
        entry = store.current(claim)
        entry.posting = entry.posting.failed(settle.error)
        if settle.action is SettleAction.ABANDON:
            not_before = wall_clock() + settle.retry_after if settle.retry_after else None
            store.release(entry, not_before, f"abandoned by {claim.owner}")
        else:
            store.move_to_trash(entry, settle.reason, wall_clock())

    async def release(self, claim: Claim) -> None:
        """Uncounted: the attempt its claim counted is taken back in the same step."""
        entry = self._store.current(claim)
        entry.posting = entry.posting.counted(max(0, entry.posting.attempts - 1), None)
        self._store.release(entry, None, f"given back unstarted by {claim.owner}")

    async def claim_lost(self, claim: Claim) -> str | None:
        return self._store.lost_because(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        self._store.cancel(job_id, reason, wall_clock())

    def could_be_job_id(self, job_id: str) -> bool:
        """Ids here are ``job-`` and a sequence of at least ten digits."""
        return job_id.isascii() and job_id.startswith("job-") and len(job_id) >= 14 and job_id[4:].isdigit()

    async def never_posted(self, job_id: str) -> bool:
        return not self.could_be_job_id(job_id) or int(job_id[4:]) > self._store.last_sequence

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        keep.report_progress(self._store, claim, progress)

    async def purge(self, older_than: float) -> int:
        self._keeper.sweep(self._store)
        return keep.purge(self._store, older_than)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        self._keeper.sweep(self._store)
        return keep.requeue(self._store, job_id, reset_attempts)

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        while True:
            change = self._shared.change()
            now = wall_clock()
            jobs = self._store.claimable(now, names)
            if jobs:
                return jobs
            with anyio.move_on_after(self._store.next_wakeup(now) or float("inf")):
                await change.wait()

    async def wait_for_completion(self, job_id: str) -> Outcome:
        while True:
            change = self._shared.change()
            self._keeper.expire(self._store, job_id)
            outcome = self._store.outcome(job_id)
            if outcome is not None:
                return outcome
            await change.wait()

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        self._shared.entities[name] = (Entity(name, dict(metadata)), self)

    async def unregister_entity(self, name: str) -> None:
        registered = self._shared.entities.get(name)
        if registered is not None and registered[1] is self:
            del self._shared.entities[name]

    async def entities(self) -> list[Entity]:
        return [entity for _, (entity, _) in sorted(self._shared.entities.items())]

    # -- flow control: stored in the shared store, honoured by its claim paths (see jobboard_memory.flow) --

    async def set_limit(self, limit: LimitSpec) -> None:
        self._store.flow.set_limit(limit)
        self._shared.notify()

    async def clear_limit(self, group: str) -> bool:
        found = self._store.flow.clear_limit(group)
        self._shared.notify()
        return found

    async def limits(self) -> list[GroupLimit]:
        return self._store.flow.listed()

    async def pause(self, name: str | None) -> None:
        self._store.flow.pause(name)
        self._shared.notify()

    async def resume(self, name: str | None) -> None:
        self._store.flow.resume(name)
        self._shared.notify()

    async def paused(self) -> Paused:
        return self._store.flow.paused()

    def inject_malformed(self, raw: bytes) -> None:
        """Test hook: store raw bytes as if another tool had written an entry."""
        try:
            self._store.admit(raw)
        except MalformedEntry:
            return
        raise ValueError("the injected bytes were a valid posting")


class MemoryBoard(JobBoard):
    """A :class:`~jobboard.board.contract.JobBoard` over a :class:`MemoryBackend`: ``MemoryBoard(url)``."""

    backend: MemoryBackend

    def __init__(self, url: str) -> None:
        super().__init__(MemoryBackend(url))
