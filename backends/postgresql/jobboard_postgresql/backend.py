"""``postgresql://user:pass@host:5432/app?board=shop``: a job board in the application's own PostgreSQL.

The backend holds collaborators, each owning one concern: :class:`~jobboard_postgresql.database.Database`
(the pool and the retry rule), :class:`~jobboard_postgresql.session.Session` (the row, the advisory lock
that dies with the process, LISTEN), :class:`~jobboard_postgresql.writes.Writer` (one function call per
state change), :class:`~jobboard_postgresql.reads.Reader`, :class:`~jobboard_postgresql.waiting.Waiting`
and :class:`~jobboard_postgresql.feed.Feed` (``events()``). The backend itself wires them, runs the
keeper (the reaper of dead sessions every ``reap_interval``, retention once a second) and renews a lost
session. See docs/backends/postgresql.md for the design, the options and the measurements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping, Sequence
from typing import Any

import asyncpg

from jobboard.backend import (
    Backend,
    Claim,
    Entity,
    Event,
    EventKind,
    Job,
    JobState,
    ListedJob,
    Outcome,
    Prepared,
    Progress,
    Settle,
    SettleAction,
    TrashedJob,
)
from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.errors import ClaimLost, JobBoardError, NotOwner
from jobboard_postgresql import schema
from jobboard_postgresql.claiming import Claiming, given_back
from jobboard_postgresql.cycles import Cycles
from jobboard_postgresql.database import Database
from jobboard_postgresql.feed import Feed
from jobboard_postgresql.flow import Flow
from jobboard_postgresql.keeper import Keeper
from jobboard_postgresql.options import parse
from jobboard_postgresql.reads import Reader
from jobboard_postgresql.waiting import Waiting
from jobboard_postgresql.writes import Writer, is_job_id

logger = logging.getLogger("jobboard_postgresql")



class PostgresBackend(Backend):
    """A board in a PostgreSQL schema; see the module docstring."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.options = options = parse(url)
        self.default_max_attempts = options.max_attempts
        self.max_posting_bytes = options.max_posting_bytes or self.max_posting_bytes
        for name in ("key_retention", "result_ttl", "trash_ttl"):
            if getattr(options, name) is not None:
                setattr(self, name, getattr(options, name))
        self.db = Database(options)
        self.writer = Writer(self.db, options.board, options.schema, options.ns)
        self.reader = Reader(self.db, options.board, options.schema, self.report_malformed)
        self.waiting = Waiting(self.db, self.reader, options.board, options.schema, options.idle_poll,
                               lambda: self._open, lambda: self.keeper.current())
        self.keeper = Keeper(options, self.db, self.waiting, lambda event: self.hub.publish(event),
                             lambda: (self.result_ttl, self.trash_ttl, self.key_retention))
        self.db.on_session_gone = self.keeper.session_gone
        self.writer.session_of = lambda: self.keeper.session_id
        self.claiming = Claiming(Cycles(self.db, options.board, options.schema, options.ns, self.writer.session_of),
                                 self.waiting, self.writer, self._unclaim, self.report_malformed, self.passed_over)
        self.feed: Feed | None = None
        self.flow = Flow(self.db, options.board, options.schema)

    # -- lifecycle ----------------------------------------------------------------

    async def open(self) -> None:
        """Connect, install the schema if it is missing or older, start a session and the keeper."""
        self.writer.key_retention = self.key_retention
        self.reader.result_ttl, self.reader.trash_ttl = self.result_ttl, self.trash_ttl
        await self.db.open()
        try:
            await self._install()
            await self.keeper.start()
        except BaseException:
            await self.db.close()
            raise
        self.feed = Feed(self.db, self.options.board, self.options.schema, self.hub.publish, self._feed_wanted,
                         self._seen)
        self._open = True

    async def _install(self) -> None:
        schema_name = self.options.schema

        async def current(connection: asyncpg.Connection) -> bool:
            if not await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", f'"{schema_name}".meta'):
                return False
            return bool(await connection.fetchval(f'SELECT max(version) FROM "{schema_name}".meta') == schema.VERSION)

        async def call(connection: asyncpg.Connection, retry: bool) -> None:
            if await current(connection):
                return
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1, -1)", self.options.ns)
                if not await current(connection):  # another board may have installed it while we waited
                    await connection.execute(schema.ddl(schema_name))

        await self.db.run("install the schema", call)

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        self.waiting.wake_all()
        await self.claiming.close()
        await self.keeper.stop()
        if self.feed is not None:
            await self.feed.stop()
        await self.keeper.close_session()
        await self.db.close()
        self.hub.close()

    # -- events --------------------------------------------------------------------

    def _feed_wanted(self) -> bool:
        return self._open and (self.hub.has_subscribers or self.waiting.completion_waiters > 0)

    def _seen(self, event: Event) -> None:
        if event.job_id is not None and event.kind in (EventKind.CONSUMED, EventKind.TRASHED, EventKind.RELEASED,
                                                       EventKind.CLAIMED):
            self.waiting.outcome_signal.fire()

    def observed(self) -> None:
        if self.feed is not None:
            self.feed.start()

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[None]:
        """Around a write: its events reach this board's subscribers before it returns."""
        feed = self.feed
        if feed is not None and feed.active:
            await feed.ready.wait()
        yield
        if feed is not None and feed.active:
            with contextlib.suppress(JobBoardError):
                await feed.catch_up()

    # -- writes --------------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        async with self._writing():
            job, _ = await self.writer.post(prepared)
        if prepared.connection is None:
            self.waiting.work()
        return job

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        async with self._writing():
            posted = await self.writer.post_many(batch)
        self.waiting.work()
        return posted

    async def claim(self, job_id: str, owner: str) -> Claim:
        claim = await self._delivered(self._claim(job_id, owner))
        assert claim is not None
        return claim

    async def _claim(self, job_id: str, owner: str) -> Claim:
        async with self._writing():
            claim, session = await self.writer.claim(job_id, owner)
        self.waiting.claimed(claim, session)
        return claim

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        """Coalesced with this process's concurrent claims and consumes (:mod:`jobboard_postgresql.claiming`)."""
        async with self._writing():
            return await self.claiming.claim_next(owner, names)

    @property
    def reports_held_back(self) -> bool:  # jb.flow_next's r_held
        return True

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """The consume, then the next claim in the same transaction, coalesced as :meth:`claim_next`."""
        if settle.connection is not None:
            await self.settle(claim, settle)
            return await self.claim_next(claim.owner, names)
        async with self._writing():
            return await self.claiming.consume_and_claim_next(claim, settle, names)

    async def _delivered(self, claiming: Coroutine[Any, Any, Claim | None]) -> Claim | None:
        """Run a claim so that a caller cancelled while it is in flight leaves no job claimed by no one.

        The claim runs in its own task, which the cancel does not interrupt (a statement cut mid-flight
        may have committed on the server). The cancelled caller waits for that task, gives back the
        claim it made (``jb.unclaim``: attempt uncounted), and only then lets the cancel through: once
        the cancelled call has returned, its job is claimable, and no claim of it lands later.
        """
        task = asyncio.ensure_future(claiming)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await given_back(self._give_back(task))
            raise

    async def _give_back(self, task: asyncio.Future[Claim | None]) -> None:
        """The outcome of a claim whose caller was cancelled: nothing, or its claim given back.
        Errors are logged, not raised (the caller is gone); a claim that cannot be given back stays
        until its session ends."""
        try:
            claim = await task
        except Exception:  # noqa: BLE001 - failed: it claimed nothing
            return
        if claim is not None:
            self.waiting.settled(claim.job.id)
            await self._unclaim(int(claim.job.id), claim.generation, claim.owner)

    async def _unclaim(self, job_id: int, generation: int, owner: str) -> None:
        """Give back a claim whose caller was cancelled (``jb.unclaim``); errors are logged."""
        if not self._open:
            return
        try:
            await self.keeper.call("give a claim back", f'SELECT "{self.options.schema}".unclaim($1, $2, $3, $4)',
                                   self.options.board, job_id, generation, owner)
        except JobBoardError as error:
            logger.warning("postgresql: a cancelled claim of job %s could not be given back: %s", job_id, error)

    async def settle(self, claim: Claim, settle: Settle) -> None:
        """A consume (not in the caller's transaction) is coalesced; an abandon or a trash is one call."""
        async with self._writing():
            if settle.action is SettleAction.CONSUME and settle.connection is None:
                await self.claiming.consume(claim, settle)
            else:
                try:
                    await self.writer.settle(claim, settle)
                finally:
                    self.waiting.settled(claim.job.id)
        if settle.action is SettleAction.ABANDON or settle.action is SettleAction.CONSUME:
            self.waiting.work()
        self.waiting.outcome_signal.fire()

    async def release(self, claim: Claim) -> None:
        """Uncounted: ``jb.unclaim``, the fenced statement that gives back a cancelled claim (a retry after a
        lost reply finds it given back: ``ClaimLost``). :raises ClaimLost: / :raises NotOwner:"""
        job_id, s = int(claim.job.id) if is_job_id(claim.job.id) else 0, f'"{self.options.schema}"'
        head = (self.options.board, job_id, claim.generation)
        async with self._writing():
            try:
                given = await self.keeper.call("release", f"SELECT {s}.unclaim($1, $2, $3, $4)", *head, claim.owner)
            finally:
                self.waiting.settled(claim.job.id)
        if not given:
            owner = await self.keeper.call("release", f"SELECT owner FROM {s}.job WHERE board = $1 AND id = $2 AND "
                                           "state = 1 AND gen = $3", *head)
            if owner is not None and owner != claim.owner:
                raise NotOwner(f"job {claim.job.id} is owned by {owner}, not {claim.owner}")
            raise ClaimLost(f"claim of job {claim.job.id} (generation {claim.generation}) is no longer current")
        self.waiting.work()

    async def claim_lost(self, claim: Claim) -> str | None:
        """"session expired" known here (the session's claims), else one read."""
        lost = (claim.job.id, claim.generation) in self.waiting.expired
        return "session expired" if lost else await self.waiting.why_lost(claim)

    async def watch_claim(self, claim: Claim) -> str:
        return await self.waiting.watch_claim(claim)

    async def cancel(self, job_id: str, reason: str) -> None:
        async with self._writing():
            await self.writer.cancel(job_id, reason)
        self.waiting.changed(job_id)
        self.waiting.outcome_signal.fire()

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self.writer.report_progress(claim, progress)

    async def purge(self, older_than: float) -> int:
        return await self.writer.purge(older_than)

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        async with self._writing():
            job = await self.writer.requeue(job_id, reset_attempts)
        self.waiting.work()
        return job

    # -- reads ---------------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        return await self.reader.get(job_id)

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.reader.listing(only_unclaimed):
            yield listed.job

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        async for listed in self.reader.listing(only_unclaimed):
            yield listed

    async def state(self, job_id: str) -> JobState:
        return await self.reader.state(job_id)

    async def owner(self, job_id: str) -> str | None:
        return await self.reader.owner(job_id)

    async def job_count(self) -> int:
        return await self.reader.job_count()

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        await self.keeper.sweep()  # what expired goes now, with its key (as the keeper's next pass would)
        async for item in self.reader.trashed():
            yield item

    def could_be_job_id(self, job_id: str) -> bool:
        return is_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        if not is_job_id(job_id):
            return True
        last = await self.keeper.call("never_posted", f'SELECT last_value FROM "{self.options.schema}".job_id')
        return int(job_id) > int(last)

    # -- waiting and entities ----------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self.waiting.wait(names)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self.waiting.wait_for_completion(job_id, self.observed)

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self.keeper.register(name, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self.keeper.unregister(name)

    async def entities(self) -> list[Entity]:
        return await self.reader.entities()

    # -- flow control (jobboard_postgresql.flow) ---------------------------------------

    async def set_limit(self, limit: LimitSpec) -> None:
        await self.flow.set_limit(limit)
        self.waiting.work()

    async def clear_limit(self, group: str) -> bool:
        found = await self.flow.clear_limit(group)
        self.waiting.work()
        return found

    async def limits(self) -> list[GroupLimit]:
        return await self.flow.limits()

    async def pause(self, name: str | None) -> None:
        await self.flow.pause(name, True)

    async def resume(self, name: str | None) -> None:
        await self.flow.pause(name, False)
        self.waiting.work()

    async def paused(self) -> Paused:
        return await self.flow.paused()
