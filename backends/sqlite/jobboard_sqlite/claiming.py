"""Claims through the board's connection: the session renewed when it was ended, and a claim that commits
after its caller was cancelled given back (the contract: no job left claimed by no caller)."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobboard.backend import Claim
from jobboard.errors import BackendUnavailable, JobBoardError
from jobboard_sqlite import writes
from jobboard_sqlite.rows import Effects
from jobboard_sqlite.writes import SessionGone

if TYPE_CHECKING:
    from jobboard_sqlite.backend import SqliteBackend


class _EndedUnder(SessionGone):
    """A claim met the end of ``session`` (the one it ran under): that session is renewed, once."""

    def __init__(self, session: str) -> None:
        super().__init__(f"session {session} ended")
        self.session = session


class Claims:
    """The claims of one board (``claim``, ``claim_next``, ``consume_and_claim_next``)."""

    def __init__(self, backend: SqliteBackend) -> None:
        self.backend = backend

    async def run(self, body: Callable[[sqlite3.Connection, Effects], Claim | None]) -> Claim | None:
        """A claim, in a transaction that checks this session is alive (a new one is started if not).
        A caller cancelled while the claim runs has the claim released in the background."""

        for _ in range(3):
            self.backend.on_its_file()
            future = self.backend.db.enqueue(functools.partial(self._attempt, body), self._give_back)
            try:
                if future.done():
                    await asyncio.sleep(0)
                result, fx = await future
            except _EndedUnder as ended:
                await self.backend.runtime.renew(ended.session)
                continue
            except asyncio.CancelledError:
                if future.done() and not future.cancelled() and future.exception() is None:
                    self._give_back(future.result())
                raise
            self.backend._apply(fx)
            if isinstance(result, JobBoardError):
                raise result
            return result  # type: ignore[return-value]
        raise BackendUnavailable(f"session of {self.backend.url} keeps ending")

    def _attempt(self, body: Callable[[sqlite3.Connection, Effects], Claim | None]) -> tuple[object, Effects]:
        """(Connection's thread.) One claim transaction; its session's end names the session it ran under."""
        session = self.backend.scope.session
        try:
            return self.backend.runtime.write_sync(body)
        except SessionGone:
            raise _EndedUnder(session) from None

    def _give_back(self, outcome: tuple[object, Effects]) -> None:
        """(Loop.) The claim a cancelled caller never saw goes back, its attempt not counted."""
        claim = outcome[0]
        if not isinstance(claim, Claim):
            return
        backend = self.backend
        try:
            released = backend.db.enqueue(
                lambda: backend.runtime.write_sync(lambda conn, fx: writes.unclaim(conn, backend.scope, claim, fx)))
        except RuntimeError:
            return  # no loop: the board's close releases it
        released.add_done_callback(self._released)

    def _released(self, future: asyncio.Future[tuple[object, Effects]]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.backend._apply(future.result()[1])
