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
import random
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
from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_postgresql import schema
from jobboard_postgresql.database import Database, permanent
from jobboard_postgresql.feed import Feed
from jobboard_postgresql.options import parse
from jobboard_postgresql.reads import Reader
from jobboard_postgresql.session import Session
from jobboard_postgresql.waiting import Waiting
from jobboard_postgresql.writes import Writer, is_job_id

logger = logging.getLogger("jobboard_postgresql")

SWEEP_INTERVAL = 1.0


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
        self.db.on_session_gone = self._session_gone
        self.writer = Writer(self.db, options.board, options.schema, options.ns)
        self.reader = Reader(self.db, options.board, options.schema, self._report)
        self.session: Session | None = None
        self._renewed = asyncio.Event()
        self.waiting = Waiting(self.db, self.reader, options.board, options.schema, options.idle_poll,
                               lambda: self._open, self._current_session)
        self.feed: Feed | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def _report(self, job_id: str, what: str) -> None:
        self.report_malformed(job_id, what)

    def _current_session(self) -> Session:
        assert self.session is not None
        return self.session

    # -- lifecycle ----------------------------------------------------------------

    async def open(self) -> None:
        """Connect, install the schema if it is missing or older, start a session and the keeper."""
        self.writer.key_retention = self.key_retention
        self.reader.result_ttl, self.reader.trash_ttl = self.result_ttl, self.trash_ttl
        await self.db.open()
        try:
            await self._install()
            await self._start_session()
        except BaseException:
            await self.db.close()
            raise
        self.feed = Feed(self.db, self.options.board, self.options.schema, self.hub.publish, self._feed_wanted,
                         self._seen)
        self._open = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._keep(), name=f"pg-keeper-{self.options.board}")]

    async def _install(self) -> None:
        schema_name = self.options.schema

        async def call(connection: asyncpg.Connection, retry: bool) -> None:
            installed = await connection.fetchval(
                "SELECT to_regclass($1) IS NOT NULL", f'"{schema_name}".meta')
            if installed and await connection.fetchval(f'SELECT max(version) FROM "{schema_name}".meta') == \
                    schema.VERSION:
                return
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1, -1)", self.options.ns)
                await connection.execute(schema.ddl(schema_name))

        await self.db.run("install the schema", call)

    async def _start_session(self) -> None:
        session = Session(self.options, self._message, self._lost)
        try:
            await session.start()
        except JobBoardError:
            raise
        except Exception as error:
            from jobboard_postgresql.database import transient
            if transient(error):
                raise BackendUnavailable(f"postgresql: cannot start a session: {error}") from error
            raise permanent(error, "start a session") from error
        self.session = session
        self.writer.session_id = session.id
        self._renewed.set()

    def _lost(self, session: Session) -> None:
        """The session's connection is gone: fence (claims made under it are lost) and renew."""
        if session is not self.session or not self._open:
            return
        self._renewed.clear()
        self.waiting.session_lost(session.id)
        self.hub.publish(Event(EventKind.SESSION_EXPIRED, None, f"session {session.id} lost"))
        self._tasks.append(asyncio.get_running_loop().create_task(self._renew(session)))

    async def _renew(self, old: Session) -> None:
        await old.close()
        delay = 0.05
        while self._open:
            try:
                await self._start_session()
                self.hub.publish(Event(EventKind.RECONNECTED, None, f"new session {self.writer.session_id}"))
                self.waiting.wake_all()
                return
            except JobBoardError as error:
                logger.debug("postgresql: session renewal failed: %s", error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _session_gone(self) -> None:
        """The server says the session is gone (``JB001``): lose it here too, wait for the new one."""
        session = self.session
        if session is not None and not session.lost:
            session._lose("the server no longer knows it")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._renewed.wait(), self.options.session_timeout)

    def _message(self, payload: str) -> None:
        if payload == "w":
            if not self.waiting.work() and self._open:  # nobody here waits: pass the wake-up on
                self._tasks.append(asyncio.get_running_loop().create_task(self._pass_wake_on()))
        elif payload.startswith("c"):
            self.waiting.changed(payload[1:])

    async def _pass_wake_on(self) -> None:
        with contextlib.suppress(JobBoardError):
            await self._call("pass a wake-up on", f'SELECT "{self.options.schema}".wake($1)', self.options.board)

    async def _call(self, what: str, query: str, *args: Any) -> Any:
        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchval(query, *args)

        return await self.db.run(what, call)

    async def _keep(self) -> None:
        """Reap dead sessions every ``reap_interval`` (jittered), sweep retention every second."""
        s, since_sweep = f'"{self.options.schema}"', SWEEP_INTERVAL
        while self._open:
            interval = self.options.reap_interval * (0.75 + random.random() / 2)
            await asyncio.sleep(interval)
            since_sweep += interval
            try:
                await self._call("reap", f"SELECT {s}.reap($1)", self.options.ns)
                if since_sweep >= SWEEP_INTERVAL:
                    since_sweep = 0.0
                    await self._sweep()
            except JobBoardError as error:
                logger.debug("postgresql: keeper pass failed: %s", error)
            self._tasks = [task for task in self._tasks if not task.done()]

    async def _sweep(self) -> None:
        await self._call("sweep", f'SELECT "{self.options.schema}".sweep($1, $2, $3, $4, $5)', self.options.board,
                         self.options.ns, self.result_ttl, self.trash_ttl, self.key_retention)

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        self.waiting.wake_all()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.feed is not None:
            await self.feed.stop()
        session = self.session
        if session is not None and not session.lost:
            with contextlib.suppress(JobBoardError):
                await self._call("close", f'SELECT "{self.options.schema}".close_session($1)', session.id)
        if session is not None:
            await session.close()
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
        return [job for job, _ in posted]

    async def claim(self, job_id: str, owner: str) -> Claim:
        claim = await self._delivered(self._claim(job_id, owner))
        assert claim is not None
        return claim

    async def _claim(self, job_id: str, owner: str) -> Claim:
        async with self._writing():
            claim = await self.writer.claim(job_id, owner)
        self.waiting.claimed(claim, self.writer.session_id)
        return claim

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        return await self._delivered(self._claim_next(owner, names))

    async def _claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        async with self._writing():
            while True:
                claim, malformed = await self.writer.claim_next(owner, names)
                if malformed is None:
                    break
                self.report_malformed(str(malformed), "not a valid posting")
        if claim is not None:
            self.waiting.claimed(claim, self.writer.session_id)
        return claim

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """One call: the consume, then the next claim in the same transaction (one round trip)."""
        if settle.connection is not None:
            await self.settle(claim, settle)
            return await self.claim_next(claim.owner, names)
        return await self._delivered(self._consume_and_claim_next(claim, settle, names))

    async def _consume_and_claim_next(self, claim: Claim, settle: Settle,
                                      names: Collection[str] | None) -> Claim | None:
        async with self._writing():
            try:
                taken, malformed = await self.writer.consume_and_claim_next(claim, settle, names)
            finally:
                self.waiting.settled(claim.job.id)
        self.waiting.work()
        self.waiting.outcome_signal.fire()
        if malformed is not None:
            self.report_malformed(str(malformed), "not a valid posting")
            return await self._claim_next(claim.owner, names)
        if taken is not None:
            self.waiting.claimed(taken, self.writer.session_id)
        return taken

    async def _delivered(self, claiming: Coroutine[Any, Any, Claim | None]) -> Claim | None:
        """Run a claim so that a caller cancelled while it is in flight leaves no job claimed by no one:
        the claim it made is given back in the background, its attempt uncounted (``jb.unclaim``)."""
        task = asyncio.ensure_future(claiming)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._give_back)
            raise

    def _give_back(self, task: asyncio.Task[Claim | None]) -> None:
        if task.cancelled() or task.exception() is not None or task.result() is None or not self._open:
            return
        claim = task.result()
        assert claim is not None
        self.waiting.settled(claim.job.id)
        self._tasks.append(asyncio.get_running_loop().create_task(self._call(
            "give a claim back", f'SELECT "{self.options.schema}".unclaim($1, $2, $3, $4)', self.options.board,
            int(claim.job.id), claim.generation, claim.owner)))

    async def settle(self, claim: Claim, settle: Settle) -> None:
        async with self._writing():
            try:
                await self.writer.settle(claim, settle)
            finally:
                self.waiting.settled(claim.job.id)
        if settle.action is SettleAction.ABANDON or settle.action is SettleAction.CONSUME:
            self.waiting.work()
        self.waiting.outcome_signal.fire()

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
        await self._sweep()  # what expired goes now, with its key (as the keeper's next pass would)
        async for item in self.reader.trashed():
            yield item

    def could_be_job_id(self, job_id: str) -> bool:
        return is_job_id(job_id)

    async def never_posted(self, job_id: str) -> bool:
        if not is_job_id(job_id):
            return True
        last = await self._call("never_posted", f'SELECT last_value FROM "{self.options.schema}".job_id')
        return int(job_id) > int(last)

    # -- waiting and entities ----------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self.waiting.wait(names)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self.waiting.wait_for_completion(job_id, self.observed)

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        s = f'"{self.options.schema}"'
        await self._call("register_entity", f"INSERT INTO {s}.entity (board, name, session, metadata) "
                                            "VALUES ($1, $2, $3, $4) ON CONFLICT (board, name) DO UPDATE SET "
                                            "session = EXCLUDED.session, metadata = EXCLUDED.metadata",
                         self.options.board, name, self.writer.session_id, encoded)

    async def unregister_entity(self, name: str) -> None:
        await self._call("unregister_entity", f'DELETE FROM "{self.options.schema}".entity WHERE board = $1 AND '
                                              "name = $2 AND session = $3", self.options.board, name,
                         self.writer.session_id)

    async def entities(self) -> list[Entity]:
        return await self.reader.entities()
