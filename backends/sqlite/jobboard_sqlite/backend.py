"""``sqlite://path?board=name``: a board in one SQLite file, shared by the processes of one host.

Every state change is one ``BEGIN IMMEDIATE`` transaction on the board's own connection, run in its
own thread (the stdlib ``sqlite3``, chosen by measurement: docs/benchmarks.md). Claims name the
board's session and die with it (:mod:`~jobboard_sqlite.runtime`); settles are fenced by the claim's
generation in the transaction that writes them. See docs/backends/sqlite.md.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jobboard.backend import (
    Backend,
    Claim,
    Entity,
    Event,
    Job,
    JobState,
    ListedJob,
    MalformedEntry,
    Outcome,
    Prepared,
    Progress,
    Settle,
    TrashedJob,
)
from jobboard.board.limits import GroupLimit, LimitSpec, Paused
from jobboard.errors import BackendUnavailable, BoardClosed, JobBoardError, JobNotFound, Unsupported
from jobboard_sqlite import files, flow, reads, schema, sessions, trash, writes
from jobboard_sqlite.claiming import Claims
from jobboard_sqlite.database import Database
from jobboard_sqlite.options import parse_sqlite_url
from jobboard_sqlite.rows import Effects, Scope, seq_of
from jobboard_sqlite.runtime import Runtime
from jobboard_sqlite.signals import Signals
from jobboard_sqlite.waiting import Waiting
from jobboard_sqlite.wake import ring
from jobboard_sqlite.writes import SessionGone

T = TypeVar("T")
_LOCAL_BOARDS: dict[Path, set[SqliteBackend]] = {}
"""The open boards of this process, by file: a commit by one wakes the others' waiters."""


class SqliteBackend(Backend):
    """A board in a SQLite file; see the module docstring and docs/backends/sqlite.md."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.options, board_options = parse_sqlite_url(url)
        self.default_max_attempts: int | None = board_options.get("max_attempts")
        self.max_posting_bytes = board_options.get("max_posting_bytes", self.max_posting_bytes)
        self.key_retention = board_options.get("key_retention", self.key_retention)
        self.result_ttl = board_options.get("result_ttl", self.result_ttl)
        self.trash_ttl = board_options.get("trash_ttl", self.trash_ttl)
        self.scope = Scope(0, "", self.key_retention, self.result_ttl, self.trash_ttl)
        self.db = Database(self.options.path, self.options.busy_timeout, self.options.synchronous)
        self.signals = Signals()
        self.runtime = Runtime(self.options, self.db, self.scope, self._apply, self.signals.everything,
                               self._publish)
        self._watch: sqlite3.Connection | None = None
        self.waiting = Waiting(self)
        self.claims = Claims(self)

    # -- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._open:
            return
        options = self.options
        if not options.create and not options.path.is_file():
            raise BackendUnavailable(f"no sqlite:// board at {options.path}: the file does not exist (opened not to "
                                     "create it, as read commands do: a post or a worker makes it)")
        files.check_directory(options.path, options.network_fs)
        try:
            await self.db.open()  # a failed open too lets its connection thread go (_disconnect)
            board = await self.db.run(lambda: self.db.write(lambda c: sessions.board_id(c, options.board, options.create)))
            if board is None:
                raise BackendUnavailable(f"no board {options.board!r} in {options.path} (opened not to create it, "
                                         "as read commands do: a post or a worker makes it)")
            self.scope.board = board
            self._watch = sqlite3.connect(str(self.options.path), timeout=0.2, isolation_level=None)
            self.runtime.watch_file()
            await self.runtime.start()
        except BaseException:
            await self._disconnect()
            raise
        self._open = True
        _LOCAL_BOARDS.setdefault(self.options.path, set()).add(self)
        self.services.spawn(self.runtime.upkeep(self._watch), name=f"jobboard-sqlite-upkeep-{self.options.board}")
        self.services.spawn(self.signals.poll(self._watch, self.options.poll_interval), name="jobboard-sqlite-poll")
        await self.runtime.tick(self._watch)  # dead sessions' claims go back before this board claims

    async def aclose(self) -> None:
        """End the session (shielded), cancel the board's background tasks (the upkeep, the poll), close the
        connections. A caller's cancellation is raised at the end (the connection's close, on its thread,
        then goes on without it): nothing is left open, even by a close cut short."""
        if not self._open:
            return
        self._open = False
        _LOCAL_BOARDS.get(self.options.path, set()).discard(self)
        try:
            await self.runtime.stop()
        except JobBoardError:
            pass  # the lock goes all the same: another board releases the claims
        finally:
            self.signals.everything()
            self.hub.close()
            for task in list(self.services.tasks):  # as JobBoard.aclose does next (skipped if this is cut short)
                if task is not asyncio.current_task():
                    task.cancel()
            await self._disconnect()

    async def _disconnect(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        await self.db.close()

    # -- plumbing -----------------------------------------------------------

    def _apply(self, fx: Effects) -> None:
        """After a commit (on the event loop): publish, report, ring the sessions it popped or poked, and
        when it changed a job, wake the waiters of this process's boards on the file (a write that changed
        no job, such as marking this session waiting, wakes nobody: a waiter would wake itself)."""
        for job_id in fx.malformed:
            self.report_malformed(job_id)
        for session, address in fx.wake:
            ring(session, address)
        if not fx.events:
            return
        publish = self.hub.publish
        for event in fx.events:
            publish(event)
        touched = [event.job_id for event in fx.events]
        for board in list(_LOCAL_BOARDS.get(self.options.path, ())):
            board.signals.touched(touched)
            board.signals.changed()

    def local_boards(self) -> list[SqliteBackend]:
        """The open boards of this process on this board (this one included)."""
        return [board for board in _LOCAL_BOARDS.get(self.options.path, ()) if board.scope.board == self.scope.board]

    def _publish(self, event: Event) -> None:
        self.hub.publish(event)

    def on_its_file(self) -> None:
        """:raises BoardClosed: the database file was deleted or replaced under the board (permanent: a worker
        stops, and its supervisor starts it again on the file there now)."""
        if self.runtime.gone is not None:
            raise BoardClosed(self.runtime.gone)

    async def _write(self, body: Callable[[sqlite3.Connection, Effects], T | JobBoardError]) -> T:
        """One write transaction; an error the body *returned* (its effects committed) is raised here. The file is
        looked at first (one ``stat``): a write never goes to a file deleted before it, unseen by others."""
        if self.runtime.gone is None:
            self.runtime.file_gone()
        self.on_its_file()
        result = await self.runtime.write(body)
        if isinstance(result, JobBoardError):
            raise result
        return result  # type: ignore[return-value]

    async def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        self.on_its_file()
        return await self.db.run(lambda: self.db.read(body))

    # -- writes -------------------------------------------------------------

    async def post(self, prepared: Prepared) -> Job:
        self._no_connection(prepared.connection)
        return await self._write(lambda conn, fx: writes.post(conn, self.scope, prepared, time.time(), fx))

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """One transaction per batch (all or, at a missing dependency, the ones before it)."""
        items = list(batch)
        for prepared in items:
            self._no_connection(prepared.connection)

        return await self._write(lambda conn, fx: writes.post_batch(conn, self.scope, items, time.time(), fx))

    @staticmethod
    def _no_connection(connection: object) -> None:
        if connection is not None:
            raise Unsupported("sqlite:// cannot write in the caller's own database transaction")

    async def claim(self, job_id: str, owner: str) -> Claim:
        now = time.time()

        def body(conn: sqlite3.Connection, fx: Effects) -> Claim | JobBoardError:
            if not writes.alive(conn, self.scope):
                raise SessionGone("session ended")
            return writes.claim(conn, self.scope, seq_of(job_id), owner, now, fx)

        claim = await self.claims.run(body)  # type: ignore[arg-type]
        assert claim is not None
        return claim

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        whys: set[str] = set()

        def body(conn: sqlite3.Connection, fx: Effects) -> Claim | None:
            whys.clear()  # a transaction tried again: its own
            return writes.claim_next(conn, self.scope, owner, names, time.time(), fx, whys)

        claim = await self.claims.run(body)
        self._passed(whys)
        return claim

    @property
    def reports_held_back(self) -> bool:
        return True

    def _passed(self, whys: set[str]) -> None:
        if whys:
            self.passed_over(whys)

    async def settle(self, claim: Claim, settle: Settle) -> None:
        self._no_connection(settle.connection)
        await self._write(lambda conn, fx: writes.settle(conn, self.scope, claim, settle, time.time(), fx))

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """The consume and the next claim in one transaction (the consume alone if the claim fails)."""
        self._no_connection(settle.connection)

        whys: set[str] = set()

        def body(conn: sqlite3.Connection, fx: Effects) -> Claim | None:
            now = time.time()
            whys.clear()
            writes.settle(conn, self.scope, claim, settle, now, fx)
            return writes.claim_next(conn, self.scope, claim.owner, names, now, fx, whys)

        taken = await self.claims.run(body)
        self._passed(whys)
        return taken

    async def release(self, claim: Claim) -> None:
        """Uncounted: the attempt its claim counted is taken back in the same fenced write."""
        why = f"given back unstarted by {claim.owner}"
        await self._write(lambda conn, fx: writes.give_back(conn, self.scope, claim, why, fx))

    async def cancel(self, job_id: str, reason: str) -> None:
        await self._write(lambda conn, fx: writes.cancel(conn, self.scope, job_id, reason, time.time(), fx))

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self._write(lambda conn, fx: writes.report_progress(conn, self.scope, claim, progress))

    async def purge(self, older_than: float) -> int:
        return await self._write(lambda conn, fx: trash.purge(conn, self.scope, older_than, time.time()))

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        return await self._write(
            lambda conn, fx: trash.requeue(conn, self.scope, job_id, reset_attempts, time.time(), fx))

    # -- reads --------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        try:
            return await self._read(lambda conn: reads.get(conn, self.scope, job_id))
        except MalformedEntry:
            self.report_malformed(job_id)
            raise JobNotFound(f"job {job_id} is not a valid posting") from None

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.listing(only_unclaimed):
            yield listed.job

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        """Pages of :data:`~jobboard_sqlite.reads.PAGE` jobs, each page one short read transaction."""
        for job_id in await self._read(lambda conn: reads.malformed_ids(conn, self.scope)):
            self.report_malformed(job_id)
        after: tuple[int, int] | None = (-1, -1)
        while after is not None:
            items, after, malformed = await self._read(functools.partial(self._page, only_unclaimed, after))
            for job_id in malformed:
                self.report_malformed(job_id)
            for item in items:
                yield item

    def _page(self, only_unclaimed: bool, after: tuple[int, int],
              conn: sqlite3.Connection) -> tuple[list[ListedJob], tuple[int, int] | None, list[str]]:
        malformed: list[str] = []
        items, following = reads.page(conn, self.scope, only_unclaimed, after, malformed)
        return items, following, malformed

    async def state(self, job_id: str) -> JobState:
        return await self._read(lambda conn: reads.state(conn, self.scope, job_id, time.time()))

    async def owner(self, job_id: str) -> str | None:
        return await self._read(lambda conn: reads.owner(conn, self.scope, job_id))

    async def job_count(self) -> int:
        return await self._read(lambda conn: reads.job_count(conn, self.scope))

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        after: tuple[float, int] | None = (-1.0, -1)
        while after is not None:
            items, after = await self._read(functools.partial(self._trash_page, after))
            for item in items:
                yield item

    def _trash_page(self, after: tuple[float, int],
                    conn: sqlite3.Connection) -> tuple[list[TrashedJob], tuple[float, int] | None]:
        return reads.trashed(conn, self.scope, time.time(), after, [])

    def could_be_job_id(self, job_id: str) -> bool:
        """Ids here are ``job-`` and a sequence of at least ten digits."""
        return seq_of(job_id) is not None

    async def never_posted(self, job_id: str) -> bool:
        seq = seq_of(job_id)
        return seq is None or seq > await self._read(lambda conn: reads.last_seq(conn, self.scope))

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        """Kept by the runtime too (before the write: a renewal under way registers it in the new session)."""
        entities = self.runtime.entities
        entities[name] = encoded
        try:
            await self._write(lambda conn, fx: sessions.register_entity(conn, self.scope, name, encoded))
        except BaseException:
            if entities.get(name) is encoded:
                del entities[name]
            raise

    async def unregister_entity(self, name: str) -> None:
        self.runtime.entities.pop(name, None)
        await self._write(lambda conn, fx: sessions.unregister_entity(conn, self.scope, name))

    async def entities(self) -> list[Entity]:
        return await self._read(lambda conn: reads.entities(conn, self.scope))

    # -- flow control (jobboard_sqlite.flow) -----------------------------------

    async def set_limit(self, limit: LimitSpec) -> None:
        await self._flow_write(lambda conn, fx: flow.set_limit(conn, self.scope, limit, fx))

    async def clear_limit(self, group: str) -> bool:
        return bool(await self._flow_write(lambda conn, fx: flow.clear_limit(conn, self.scope, group, fx)))

    async def limits(self) -> list[GroupLimit]:
        return await self._read(lambda conn: flow.limits(conn, self.scope))

    async def pause(self, name: str | None) -> None:
        await self._flow_write(lambda conn, fx: flow.pause(conn, self.scope, name, True, fx))

    async def resume(self, name: str | None) -> None:
        await self._flow_write(lambda conn, fx: flow.pause(conn, self.scope, name, False, fx))

    async def paused(self) -> Paused:
        return await self._read(lambda conn: flow.paused(conn, self.scope))

    async def _flow_write(self, body: Callable[[sqlite3.Connection, Effects], object]) -> object:
        """A write of a limit or pause; the waiters of this process's boards look again."""
        result = await self._write(body)
        for board in self.local_boards():
            board.signals.changed()
        return result

    # -- waiting --------------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self.waiting.wait(names)

    async def wait_for_completion(self, job_id: str) -> Outcome:
        return await self.waiting.wait_for_completion(job_id)

    async def claim_lost(self, claim: Claim) -> str | None:  # one read
        return await self._read(lambda conn: reads.lost_because(conn, self.scope, claim))

    async def watch_claim(self, claim: Claim) -> str:
        return await self.waiting.watch_claim(claim)

    def observed(self) -> None:
        self.waiting.observed()

    def inject_malformed(self, raw: bytes) -> None:
        """Test hook (synchronous, a connection of its own): store raw bytes as a job's posting."""
        schema.inject(self.options.path, self.scope.board, raw)
