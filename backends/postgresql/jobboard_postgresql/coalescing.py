"""Claim coalescing: the concurrent claims and consumes of one process share one statement.

Each ``claim_next``, consume or fused ``consume_and_claim_next`` of the board is a :class:`Request`
queued here. A dispatcher task sends the queue as ``jb.cycle`` calls (:class:`~jobboard_postgresql.
cycles.Cycles`), at most ``in_flight`` at a time: the requests that arrive while one is in flight
go together in the next (every queued request, up to ``limit``), each consume still fenced by its own claim's generation and owner, each
claim asking for at most one job (a statement claims no more jobs than it has requests wanting one:
nothing is hoarded). Callers woken together (a batch's answers) join one statement: their wake-ups are
scheduled before the dispatcher's (which the first of them triggers), so all of them have queued when it
takes the queue. Ownership: the dispatcher and the statements'
tasks are this object's; a request's answer is its caller's. A request not yet sent can be
withdrawn (its caller was cancelled: nothing happened); one sent is answered even if its caller has
gone (:attr:`Request.landed`), so that the caller can give back a claim it did not take.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jobboard.board.services import wait_ended
from jobboard.errors import BoardClosed

IN_FLIGHT = 2
"""Statements in flight per board. Each takes every request queued (up to :data:`LIMIT`): the callers a
statement answers come back together and go together in the next (the fewest statements: 16 claimers,
one statement of 16, measured 25 % less CPU per cycle than two of 8); the second lane serves the calls
that arrive while one is in flight, and keeps claims going while a statement waits for a row lock."""

LIMIT = 64
"""Requests per statement at most."""


@dataclass(eq=False)
class Request:
    """One caller's consume (``consume``: job id, generation, encoded result) and/or claim (``claims``)."""

    owner: str
    claims: bool
    names: tuple[str, ...] | None = None
    consume: tuple[int, int, bytes | None] | None = None
    nonce: str = field(default_factory=lambda: str(uuid.uuid4()))
    future: asyncio.Future[Answer] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    landed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the request's statement ended (answered or failed), whether its caller waits or not."""
    sent: bool = False
    answer: Answer | None = None

    def finish(self, answer: Answer | None, error: BaseException | None) -> None:
        self.answer = answer
        if not self.future.done():
            if error is not None:
                self.future.set_exception(error)
            else:
                assert answer is not None
                self.future.set_result(answer)
        self.landed.set()


@dataclass
class Answer:
    """A request's outcome: its consume's fence status and detail, the claim's row (or ``None``), the session;
    ``held``: why the jobs its claim passed over were held back (``'concurrency,rate'``...; ``None``: none)."""

    status: int | None
    detail: str | None
    row: Any
    session: int
    held: str | None = None


Send = Callable[[list[Request]], Awaitable[list[Answer]]]


class Coalescer:
    """The queue of one board's claims and consumes; see the module docstring."""

    def __init__(self, send: Send, in_flight: int = IN_FLIGHT, limit: int = LIMIT) -> None:
        self._send, self.in_flight, self.limit = send, in_flight, limit
        self._pending: list[Request] = []
        self._running: set[asyncio.Task[None]] = set()
        self._wakeup = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._closed = False
        self.statements = 0
        """Statements sent (a benchmark's counter)."""

    def submit(self, request: Request) -> Request:
        """Queue ``request`` (it is sent at the dispatcher's next turn). :raises BoardClosed: closed."""
        if self._closed:
            raise BoardClosed("the board is closed")
        self._pending.append(request)
        self._wakeup.set()
        if self._dispatcher is None:
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch(), name="pg-coalescer")
        return request

    def withdraw(self, request: Request) -> bool:
        """Take back a request not yet sent; ``False`` if it was sent (it will be answered)."""
        if request.sent or request not in self._pending:
            return False
        self._pending.remove(request)
        request.landed.set()
        return True

    async def _dispatch(self) -> None:
        while not self._closed:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending and len(self._running) < self.in_flight:
                batch = self._take(self.limit)
                task = asyncio.get_running_loop().create_task(self._run(batch))
                self._running.add(task)
                task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._wakeup.set()

    def _take(self, count: int) -> list[Request]:
        """Up to ``count`` requests, in order, whose claims all filter by the same names."""
        names = next((r.names for r in self._pending if r.claims), None)
        batch = [r for r in self._pending if not r.claims or r.names == names][:count]
        taken = set(map(id, batch))
        self._pending = [r for r in self._pending if id(r) not in taken]
        for request in batch:
            request.sent = True
        return batch

    async def _run(self, batch: list[Request]) -> None:
        self.statements += 1
        try:
            answers = await self._send(batch)
        except BaseException as error:  # every caller is told; a cancel (close) is re-raised
            failure = error if isinstance(error, Exception) else BoardClosed("the board closed during the call")
            for request in batch:
                request.finish(None, failure)
            if not isinstance(error, Exception):
                raise
            return
        for request, answer in zip(batch, answers, strict=True):
            request.finish(answer, None)

    async def close(self, limit: float = 10.0) -> None:
        """Refuse new requests, fail the queued ones (``BoardClosed``), let the statements in flight end
        (cancelled after ``limit`` seconds: their claims die with the session)."""
        self._closed = True
        pending, self._pending = self._pending, []
        for request in pending:
            request.finish(None, BoardClosed("the board closed before the call was sent"))
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await wait_ended([self._dispatcher])  # the caller's cancellation ends the wait (not swallowed)
        if self._running:
            _, late = await asyncio.wait(set(self._running), timeout=limit)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
