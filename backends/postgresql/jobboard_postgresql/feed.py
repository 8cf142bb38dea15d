"""``events()`` on a ``postgresql://`` board: the ``event`` table read in commit order, only while asked.

Every state change inserts its events in its own transaction (an UNLOGGED table: events are a hint,
truncated by a server crash, deleted after two minutes). A reader must not skip rows whose transaction
commits late (ids are taken before commit, commits come in any order), so it reads by transaction id:
every visible row with ``xid`` >= the cursor, publishes those it has not published yet, and moves the
cursor to ``xmin``, the oldest transaction still running (every transaction below it has ended; none can
add rows there). Rows at or above ``xmin`` are remembered until the cursor passes them: an event is
published once, as soon as its transaction committed, whatever runs beside it.

The feed runs only while someone subscribed or waits for a completion (it costs what it reads: one
query per :data:`POLL` seconds, plus one after each of this board's own writes, so a board's own events
come in order before its call returns). It starts from the events of the last second, so a subscriber
also sees another board's write that raced its subscription. While it runs, the reader keeps its board's
``observed`` row at least :data:`OBSERVED_FOR` seconds ahead (renewed every third of that, before its first
read): ``post_head`` and ``post_plain`` (a bulk post) write their ``posted`` events only then, so they cost nothing while
nobody reads them. Every event of a post that starts after the reader's first read is written; a bulk post
racing the subscription may have written none (the other events are never gated).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import asyncpg

from jobboard.backend import Event, EventKind
from jobboard.board.services import wait_ended
from jobboard_postgresql.database import Database

logger = logging.getLogger("jobboard_postgresql")

POLL = 0.05
OBSERVED_FOR = 30.0
"""How long the ``observed`` mark a reader renews holds (a reader that dies stops the events within that)."""
KINDS = {kind.value: kind for kind in EventKind}


class Feed:
    """The event reader of one board."""

    def __init__(self, db: Database, board: str, schema: str, publish: Callable[[Event], None],
                 wanted: Callable[[], bool], seen: Callable[[Event], None]) -> None:
        self.db, self.board, self.s, self.publish = db, board, f'"{schema}"', publish
        self._wanted, self._seen = wanted, seen
        self._cursor: int | None = None
        self._published: dict[int, int] = {}
        """Events published whose transaction is not below the cursor yet (id -> xid): not published twice."""
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    @property
    def active(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Begin reading (no-op while reading)."""
        if self._task is None:
            self.ready.clear()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"pg-events-{self.board}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:  # a cancellation of the caller ends the wait, the task ends in the background
            task.cancel()
            await wait_ended([task])

    async def _run(self) -> None:
        try:
            await self._init()
            marked = time.monotonic()
            while self._wanted():
                await asyncio.sleep(POLL)
                if time.monotonic() - marked > OBSERVED_FOR / 3:
                    with contextlib.suppress(Exception):  # tried again at the next poll
                        await self.db.run("events", self._mark)
                        marked = time.monotonic()
                try:
                    await self.catch_up()
                except Exception as error:  # noqa: BLE001 - a transient outage: the next poll reads on from the cursor
                    logger.debug("postgresql: event read failed: %s", error)
        finally:
            self._task, self._cursor, self._published = None, None, {}
            self.ready.set()
            if self._wanted() and not asyncio.current_task().cancelling():  # type: ignore[union-attr]
                self.start()  # a subscriber came while this reader was stopping

    async def _mark(self, connection: asyncpg.Connection, retry: bool) -> None:
        await connection.execute(
            f"INSERT INTO {self.s}.observed AS o (board, until) VALUES ($1, {self.s}.now() + $2) ON CONFLICT (board) "
            "DO UPDATE SET until = greatest(o.until, excluded.until)", self.board, OBSERVED_FOR)

    async def _init(self) -> None:
        async def call(connection: asyncpg.Connection, retry: bool) -> int:
            await self._mark(connection, retry)
            return int(await connection.fetchval(
                f"SELECT least((pg_snapshot_xmin(pg_current_snapshot())::text)::bigint, (SELECT (min(xid)::text)::bigint "
                f"FROM {self.s}.event WHERE at >= now() - interval '1 second' AND board = $1))", self.board))

        try:
            self._cursor = await self.db.run("events", call)
        finally:
            self.ready.set()

    async def catch_up(self) -> None:
        """Publish every event committed since the last read (one query)."""
        if self._cursor is None:
            return
        async with self._lock:
            cursor = self._cursor
            if cursor is None:  # the reader stopped while this call waited for the lock
                return

            async def call(connection: asyncpg.Connection, retry: bool) -> list[asyncpg.Record]:
                return list(await connection.fetch(f"SELECT * FROM {self.s}.events($1, $2)", self.board, cursor))

            rows = await self.db.run("events", call)
            for row in rows:
                kind = KINDS.get(row["r_kind"]) if row["r_kind"] is not None else None
                if kind is not None and row["r_id"] not in self._published:
                    self._published[row["r_id"]] = row["r_xid"]
                    event = Event(kind, None if row["r_job"] is None else str(row["r_job"]), row["r_detail"] or "")
                    self.publish(event)
                    self._seen(event)
            if rows and self._cursor is not None:  # (not if the reader stopped during the read)
                upto = max(cursor, rows[-1]["r_upto"])
                self._cursor = upto
                self._published = {key: xid for key, xid in self._published.items() if xid >= upto}
