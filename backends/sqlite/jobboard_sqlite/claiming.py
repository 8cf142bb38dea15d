"""Claims through the board's connection: the session renewed when it was ended, and a claim that commits
after its caller was cancelled given back (the contract: no job left claimed by no caller)."""

from __future__ import annotations

import asyncio
import concurrent.futures
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


class Claims:
    """The claims of one board (``claim``, ``claim_next``, ``consume_and_claim_next``)."""

    def __init__(self, backend: SqliteBackend) -> None:
        self.backend = backend

    async def run(self, body: Callable[[sqlite3.Connection, Effects], Claim | None]) -> Claim | None:
        """A claim, in a transaction that checks this session is alive (a new one is started if not).
        A caller cancelled while the claim runs has the claim released in the background."""

        for _ in range(3):
            future = await self.backend.db.call(lambda: self.backend.runtime.write_sync(body))
            try:
                if future.done():
                    await asyncio.sleep(0)
                    result, fx = future.result()
                else:
                    result, fx = await asyncio.wrap_future(future)
            except SessionGone:
                await self.backend.runtime.renew()
                continue
            except asyncio.CancelledError:
                future.add_done_callback(functools.partial(self._release_cancelled, asyncio.get_running_loop()))
                raise
            self.backend._apply(fx)
            if isinstance(result, JobBoardError):
                raise result
            return result  # type: ignore[return-value]
        raise BackendUnavailable(f"session of {self.backend.url} keeps ending")

    def _release_cancelled(self, loop: asyncio.AbstractEventLoop,
                           future: concurrent.futures.Future[tuple[object, Effects]]) -> None:
        """(Any thread.) The claim a cancelled caller never saw goes back, its attempt not counted."""
        if future.cancelled() or future.exception() is not None:
            return
        claim = future.result()[0]
        if not isinstance(claim, Claim):
            return

        def release() -> None:
            try:
                _, fx = self.backend.runtime.write_sync(lambda conn, fx: writes.unclaim(conn, self.backend.scope, claim, fx))
            except JobBoardError:
                return
            loop.call_soon_threadsafe(self.backend._apply, fx)

        try:
            self.backend.db.submit(release)
        except RuntimeError:
            pass  # the board closed: its close released the claim
