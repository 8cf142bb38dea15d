"""``dict://NAME``: an in-process board in plain dicts, written only against :mod:`jobboard.backend`. Boards on
one name in one process share one :class:`Store`; closing a board releases its claims and entities, as a lost
session would. Each operation is one synchronous step of the store (atomic on the event loop); waits sleep on
a notice every change sets. Unsupported (declared to the conformance suite): progress, purge, requeue,
``result_ttl`` and ``trash_ttl`` (kept results and the trash stay until the process ends)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

import anyio

from jobboard.backend import (
    COMMON_OPTIONS,
    Backend,
    Claim,
    Entity,
    Event,
    Job,
    JobState,
    Outcome,
    Prepared,
    Settle,
    SettleAction,
    TrashedJob,
    parse_options,
    parse_url,
)
from jobboard_dict.store import ID_PREFIX, Store


class Shared:
    """One named board: its store, the backends open on it, their entities, and the change notice."""

    def __init__(self) -> None:
        self.backends: set[DictBackend] = set()
        self.store = Store(self.publish)
        self.entities: dict[str, tuple[Entity, DictBackend]] = {}
        self.changed = anyio.Event()  # set at the next change: take it *before* looking, then wait on it

    def publish(self, event: Event) -> None:  # every board on this name sees every event
        for backend in self.backends:
            backend.hub.publish(event)
        self.notify()

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


_BOARDS: dict[str, Shared] = {}


class DictBackend(Backend):
    """The ``dict://`` backend; see the module docstring. Constructed with the URL (by ``open_board``)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parsed = parse_url(url)  # InvalidURL for what cannot be parsed
        self.use_options(parse_options(parsed, COMMON_OPTIONS))  # InvalidURL for an unknown option
        self._name = parsed.host_string + parsed.path

    @property
    def _shared(self) -> Shared:
        self.ensure_open()  # BoardClosed for a wait that outlives aclose()
        return _BOARDS[self._name]

    @property
    def _store(self) -> Store:
        return self._shared.store

    async def open(self) -> None:
        shared = _BOARDS.setdefault(self._name, Shared())
        shared.backends.add(self)
        self._open = True

    async def aclose(self) -> None:
        if not self._open:
            return
        shared = self._shared
        for entry in [entry for entry in shared.store.jobs.values() if entry.holder is self]:
            shared.store.release(entry, None, f"owner {entry.owner} closed its board")
        for name in [name for name, (_, holder) in shared.entities.items() if holder is self]:
            del shared.entities[name]
        shared.backends.discard(self)
        self.hub.close()
        self._open = False
        shared.notify()  # waiters on this board wake and raise BoardClosed

    async def post(self, prepared: Prepared) -> Job:
        existing = self._store.keyed(prepared.posting.key, self.key_retention)
        return existing if existing is not None else self._store.admit(prepared.posting)

    async def claim(self, job_id: str, owner: str) -> Claim:
        return self._store.claim(job_id, owner, self, time.time())

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        self._report_malformed()
        return self._store.claim_next(owner, self, time.time(), names)

    async def settle(self, claim: Claim, settle: Settle) -> None:
        store = self._store
        if settle.action is SettleAction.CONSUME:
            store.consume(claim, settle.encoded_result)
            return
        entry = store.current(claim)  # the fence, before anything changes
        entry.posting = entry.posting.failed(settle.error)
        if settle.action is SettleAction.ABANDON:
            due = time.time() + settle.retry_after if settle.retry_after else None
            store.release(entry, due, f"abandoned by {claim.owner}")
        else:
            store.move_to_trash(entry, settle.reason, time.time())

    async def cancel(self, job_id: str, reason: str) -> None:
        self._store.move_to_trash(self._store.entry(job_id), reason, time.time())

    async def get(self, job_id: str) -> Job:
        return self._store.entry(job_id).job()

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        self._report_malformed()
        for entry in self._store.ordered():
            if not only_unclaimed or entry.state() is JobState.UNCLAIMED:
                yield entry.job()

    async def state(self, job_id: str) -> JobState:
        return self._store.state(job_id)

    async def owner(self, job_id: str) -> str | None:
        entry = self._store.jobs.get(job_id)
        return entry.owner if entry is not None else None

    async def job_count(self) -> int:
        return len(self._store.jobs)

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        for item in list(self._store.trash.values()):
            yield item

    def could_be_job_id(self, job_id: str) -> bool:
        number = job_id.removeprefix(ID_PREFIX)
        return job_id.startswith(ID_PREFIX) and number.isascii() and number.isdigit() and len(number) < 20

    async def never_posted(self, job_id: str) -> bool:
        return not self.could_be_job_id(job_id) or int(job_id.removeprefix(ID_PREFIX)) > self._store.last_sequence

    def _report_malformed(self) -> None:
        for job_id in self._store.malformed:
            self.report_malformed(job_id)  # once per board: the services remember

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        while True:
            change, now = self._shared.changed, time.time()
            jobs = [entry.job() for entry in self._store.ordered() if entry.claimable(now, names)]
            if jobs:
                return jobs
            with anyio.move_on_after(self._store.next_due(now) or float("inf")):
                await change.wait()

    async def wait_for_completion(self, job_id: str) -> Outcome:
        while True:
            change = self._shared.changed
            outcome = self._store.outcome(job_id)
            if outcome is not None:
                return outcome
            await change.wait()

    async def watch_claim(self, claim: Claim) -> str:
        while self._open:
            change = self._shared.changed
            reason = self._store.lost_because(claim)
            if reason is not None:
                return reason
            await change.wait()
        return "board closed"

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        self._shared.entities[name] = (Entity(name, dict(metadata)), self)

    async def unregister_entity(self, name: str) -> None:
        registered = self._shared.entities.get(name)
        if registered is not None and registered[1] is self:
            del self._shared.entities[name]

    async def entities(self) -> list[Entity]:
        return [entity for _, (entity, _) in sorted(self._shared.entities.items())]

    def inject_malformed(self, raw: bytes) -> None:
        """Test hook: an entry that is not a posting, as if another tool had written it."""
        store = self._store
        store.last_sequence += 1
        store.malformed[f"{ID_PREFIX}{store.last_sequence}"] = raw
