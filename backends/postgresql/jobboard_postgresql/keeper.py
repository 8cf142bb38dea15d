"""What a ``postgresql://`` board runs beside its calls: its session's life, the reaper and retention.

- The session: started at open; when its connection is lost (or the server says it is gone, SQLSTATE
  ``JB001``) the board is fenced at once (``waiting.session_lost``: every claim made under it is lost,
  ``SESSION_EXPIRED`` published) and a new session started, retried with back-off until the board
  closes; entities registered by the board are registered again under the new session.
- NOTIFY payloads of the session's channel: ``w`` wakes the local waiters, or is passed on to another
  idle session when nobody here waits; ``c<job>`` says a claim of this board was changed elsewhere.
- The keeper loop: the reaper every ``reap_interval`` (jittered), retention (``sweep``) every second.
  A failed pass is logged at DEBUG and tried again at the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

import asyncpg

from jobboard.backend import Event, EventKind
from jobboard.board.services import wait_ended
from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_postgresql.database import Database, permanent, transient
from jobboard_postgresql.options import Options
from jobboard_postgresql.session import Session
from jobboard_postgresql.waiting import Waiting

logger = logging.getLogger("jobboard_postgresql")

SWEEP_INTERVAL = 1.0


class Keeper:
    """The session and background work of one board; ``retention()`` gives the sweep's three figures."""

    def __init__(self, options: Options, db: Database, waiting: Waiting, publish: Callable[[Event], None],
                 retention: Callable[[], tuple[float, float, float]]) -> None:
        self.options, self.db, self.waiting, self.publish = options, db, waiting, publish
        self.retention = retention
        self.s = f'"{options.schema}"'
        self.session: Session | None = None
        self.renewed = asyncio.Event()
        self.entities: dict[str, bytes] = {}
        """What this board registered (to register again under a new session)."""
        self.running = False
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def session_id(self) -> int:
        return 0 if self.session is None else self.session.id

    def current(self) -> Session:
        assert self.session is not None
        return self.session

    def spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        """Start the first session and the keeper loop. :raises BackendUnavailable: / a permanent error."""
        await self._start_session()
        self.running = True
        self.spawn(self._keep())

    async def stop(self) -> None:
        self.running = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await wait_ended(tasks)

    async def call(self, what: str, query: str, *args: Any) -> Any:
        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchval(query, *args)

        return await self.db.run(what, call)

    # -- the session ----------------------------------------------------------------

    async def _start_session(self) -> None:
        session = Session(self.options, self._message, self._lost)
        try:
            await session.start()
        except JobBoardError:
            raise
        except Exception as error:
            if transient(error):
                raise BackendUnavailable(f"postgresql: cannot start a session: {error}") from error
            raise permanent(error, "start a session") from error
        self.session = session
        self.renewed.set()

    def _lost(self, session: Session) -> None:
        """The session's connection is gone: fence (claims made under it are lost) and renew."""
        if session is not self.session or not self.running:
            return
        self.renewed.clear()
        self.waiting.session_lost(session.id)
        self.publish(Event(EventKind.SESSION_EXPIRED, None, f"session {session.id} lost"))
        self.spawn(self._renew(session))

    async def _renew(self, old: Session) -> None:
        await old.close()
        delay = 0.05
        while self.running:
            try:
                await self._start_session()
                for name, encoded in list(self.entities.items()):
                    await self.register(name, encoded)
                self.publish(Event(EventKind.RECONNECTED, None, f"new session {self.session_id}"))
                self.waiting.wake_all()
                return
            except JobBoardError as error:
                logger.debug("postgresql: session renewal failed: %s", error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def session_gone(self, session_id: int | None) -> None:
        """The server says session ``session_id`` is gone (``JB001``): lose it here too if it is still the
        board's (a call sent under the session a renewal replaced must not lose the new one), and wait for
        the new one."""
        session = self.session
        if session is not None and not session.lost and session_id in (None, session.id):
            session.lose("the server no longer knows it")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.renewed.wait(), self.options.session_timeout)

    def _message(self, payload: str) -> None:
        if payload == "w":
            if not self.waiting.work() and self.running:  # nobody here waits: pass the wake-up on
                self.spawn(self._pass_wake_on())
        elif payload.startswith("c"):
            self.waiting.changed(payload[1:])

    async def _pass_wake_on(self) -> None:
        with contextlib.suppress(JobBoardError):
            await self.call("pass a wake-up on", f"SELECT {self.s}.wake($1)", self.options.board)

    async def close_session(self) -> None:
        """Release this board's claims and entities (one call) and close the session's connection."""
        session = self.session
        if session is not None and not session.lost:
            with contextlib.suppress(JobBoardError):
                await self.call("close", f"SELECT {self.s}.close_session($1)", session.id)
        if session is not None:
            await session.close()

    # -- entities -------------------------------------------------------------------

    async def register(self, name: str, encoded: bytes) -> None:
        self.entities[name] = encoded
        await self.call("register_entity", f"INSERT INTO {self.s}.entity (board, name, session, metadata) "
                                           "VALUES ($1, $2, $3, $4) ON CONFLICT (board, name) DO UPDATE SET "
                                           "session = EXCLUDED.session, metadata = EXCLUDED.metadata",
                        self.options.board, name, self.session_id, encoded)

    async def unregister(self, name: str) -> None:
        self.entities.pop(name, None)
        await self.call("unregister_entity", f"DELETE FROM {self.s}.entity WHERE board = $1 AND name = $2 AND "
                                             "session = $3", self.options.board, name, self.session_id)

    # -- the keeper loop ------------------------------------------------------------

    async def _keep(self) -> None:
        """Reap dead sessions every ``reap_interval`` (jittered), sweep retention every second."""
        since_sweep = SWEEP_INTERVAL
        while self.running:
            interval = self.options.reap_interval * (0.75 + random.random() / 2)
            await asyncio.sleep(interval)
            since_sweep += interval
            try:
                await self.call("reap", f"SELECT {self.s}.reap($1)", self.options.ns)
                if since_sweep >= SWEEP_INTERVAL:
                    since_sweep = 0.0
                    await self.sweep()
            except JobBoardError as error:
                logger.debug("postgresql: keeper pass failed: %s", error)

    async def sweep(self) -> None:
        """Drop expired kept results, trash entries (with their keys), settled keys, old events and evidence."""
        result_ttl, trash_ttl, key_retention = self.retention()
        await self.call("sweep", f"SELECT {self.s}.sweep($1, $2, $3, $4, $5)", self.options.board, self.options.ns,
                        result_ttl, trash_ttl, key_retention)
