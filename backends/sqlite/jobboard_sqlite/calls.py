"""Where a board's SQL runs, and the file's write turn (group commit per process).

A call (a closure that reads or writes through the connection) runs **inline**, on the event loop, when
the connection is free and, for a write, this board holds the write turn or can take it at once. The turn
is an ``flock`` on ``<db>-jobboard/write.turn`` that the boards of every process take before
``BEGIN IMMEDIATE``. Once taken inline it is **kept** while the board goes on writing: it is given back
at the first turn of the event loop in which no write ran, or after :data:`HOLD_FOR` seconds. So the
claimers of one process that are ready together write one after the other in one turn, without a
hand-over between processes for each transaction.

A write that finds the turn taken by another process is **queued**; a waiter thread waits for the turn in
the kernel (on a duplicate of the board's descriptor: the same lock) and hands it to the event loop, which
runs every queued call inline, in order, in that one turn. A queued call whose caller is cancelled before
it ran never runs. The connection's thread runs what must not block the loop (opening, closing,
checkpoints) and a call that SQLite itself finds busy (a checkpoint, a writer that is not a board), which
it retries with a short sleep; a retried call whose caller is cancelled is given up before its next
``BEGIN IMMEDIATE`` (:class:`Withdrawn`: a busy attempt applied nothing), only a ``COMMIT`` under way is finished.

**Order.** The calls of one connection apply in the order they were made, whichever way each runs: while
any call is queued or on the connection's thread, the calls made after it queue behind it (a count of the
calls on the thread, kept on the loop). **The turn.** Only the loop takes the turn (at once, or from the
waiter) and gives it back; a write sent to the thread writes under the turn the loop took for it, which
the loop keeps (does not give back) until the thread is done: the thread never locks nor unlocks it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from jobboard.errors import BackendUnavailable
from jobboard_sqlite import files

T = TypeVar("T")

HOLD_FOR = 0.010
"""Seconds a board keeps the write turn at most while it goes on writing (then it gives it back). Each hand-over
between processes costs wake-ups and context switches; 10 ms rather than 2 ms: with 4 processes of 4 claimers,
3.3-4.7x fewer turns a cycle, half the voluntary switches and 4-33 % less CPU a cycle in 5 paired interleaved sets
(load 6-12; docs/backends/sqlite.md). The price: a process that waits behind k busy writers waits up to k x 10 ms."""
TURN_PATIENCE = 0.5
"""Seconds a board waits for the write turn before it writes without it (the turn only spares busy retries:
SQLite's lock is what serializes the writers; a holder stopped between two writes must not stop the file)."""


class TurnTaken(Exception):
    """An inline write found the write turn held by another process: the call is queued."""


class Busy(Exception):
    """An inline transaction found SQLite's lock busy: the call goes to the connection's thread."""


class Withdrawn(Exception):
    """A call on the connection's thread whose caller was cancelled, given up before it wrote anything."""


@dataclass(slots=True)
class Queued(Generic[T]):
    work: Callable[[], T]
    future: asyncio.Future[T]
    orphan: Callable[[T], None] | None


class Calls:
    """The calls of one connection (see the module docstring). Not thread-safe: used from its event loop,
    except :meth:`take_turn`, which the transaction code calls where it runs."""

    def __init__(self, hold_for: float = HOLD_FOR, patience: float = TURN_PATIENCE) -> None:
        self.hold_for, self.patience = hold_for, patience
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jobboard-sqlite")
        self.mutex = threading.Lock()
        self._inline = threading.local()
        self._running = threading.local()
        """(The connection's thread.) ``withdrawn``: the event set when the caller of the call running there is
        cancelled."""
        self._queue: deque[Queued[Any]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.turn_fd = -1
        self._held = False
        self._waiting = False
        self._held_since = 0.0
        self._release_at: asyncio.Handle | None = None
        self._patience: asyncio.TimerHandle | None = None
        self._waiter: threading.Thread | None = None
        self._turn_requests: queue.SimpleQueue[tuple[int, asyncio.AbstractEventLoop] | None] = queue.SimpleQueue()
        self._turnless = False
        self._writes_seen = 0
        self._on_thread = 0
        self.writes = self.thread_calls = self.turns = self.turn_waits = self.queued = 0
        self.turn_wait_s = self.grant_delay_s = self.held_s = 0.0
        """Seconds: waiting for the turn in the kernel; from the waiter's flock to the loop running the queue
        (the hand-over's cost in this process); holding the turn."""

    # -- running a call -------------------------------------------------------

    def enqueue(self, work: Callable[[], T], orphan: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """(Loop.) ``work`` run inline now if it can, else queued; its future. ``orphan`` gets the result of
        a call that completed after its caller was cancelled (a claim to give back)."""
        self._loop = loop = asyncio.get_running_loop()
        call = Queued(work, loop.create_future(), orphan)
        if self._queue or self._on_thread or not self._attempt(call):
            self._queue.append(call)
            self.queued += 1
        return call.future

    async def run(self, work: Callable[[], T]) -> T:
        """Run ``work`` (see :meth:`enqueue`) and wait; a caller cancelled while it is queued withdraws it."""
        future = self.enqueue(work)
        if future.done():
            await asyncio.sleep(0)  # let the other tasks run between two inline calls
            return future.result()
        return await future

    def submit(self, work: Callable[[], T]) -> concurrent.futures.Future[T]:
        """(Loop.) Run ``work`` on the connection's thread (does not wait); the calls made after it queue
        behind it until it is done."""
        self._loop = loop = asyncio.get_running_loop()
        self._on_thread += 1
        done = self.executor.submit(self._locked, work)
        done.add_done_callback(lambda _: self._call_soon(self._thread_done, loop=loop))
        return done

    def _locked(self, work: Callable[[], T]) -> T:
        with self.mutex:
            self.thread_calls += 1
            return work()

    def _thread_done(self) -> None:
        """(Loop, once per call on the thread, after its done callbacks were scheduled.) The calls queued
        behind it run; the turn kept for it is looked at again."""
        self._on_thread -= 1
        if self._on_thread:
            return
        self.drain()
        if self._held and self._release_at is None and self._loop is not None:
            self._release_at = self._loop.call_soon(self._release)

    def _attempt(self, call: Queued[Any]) -> bool:
        """Run ``call`` inline if the connection is free; whether it is done (else it must wait)."""
        if not self.mutex.acquire(blocking=False):
            return False
        self._inline.on = True
        try:
            result = call.work()
        except TurnTaken:
            self._wait_for_turn()
            return False
        except Busy:
            self._to_thread(call)
            return True
        except BaseException as error:  # noqa: BLE001 (handed to the caller through the future)
            call.future.set_exception(error)
        else:
            call.future.set_result(result)
        finally:
            self._inline.on = False
            self.mutex.release()
        return True

    def drain(self) -> None:
        """(Loop.) Run the queued calls that can run now, in order (none while a call is on the thread)."""
        while self._queue and not self._on_thread:
            call = self._queue[0]
            if call.future.cancelled():
                self._queue.popleft()
                continue
            if not self._attempt(call):
                return
            self._queue.popleft()

    def _to_thread(self, call: Queued[Any]) -> None:
        """A call SQLite found busy: the thread retries it, under the turn the loop keeps for it, until its caller
        is cancelled (see :meth:`withdrawn`)."""
        loop = asyncio.get_running_loop()
        withdrawn = threading.Event()
        call.future.add_done_callback(lambda future: withdrawn.set() if future.cancelled() else None)
        done = self.submit(lambda: self._withdrawable(call.work, withdrawn))
        done.add_done_callback(lambda _: self._call_soon(self._settle, call, done, loop=loop))

    def _withdrawable(self, work: Callable[[], T], withdrawn: threading.Event) -> T:
        self._running.withdrawn = withdrawn
        try:
            return work()
        finally:
            self._running.withdrawn = None

    def withdrawn(self) -> bool:
        """(Where a transaction runs.) Whether the caller of the call running on the connection's thread was
        cancelled: the transaction code looks before each ``BEGIN IMMEDIATE`` and gives up (:class:`Withdrawn`)."""
        event: threading.Event | None = getattr(self._running, "withdrawn", None)
        return event is not None and event.is_set()

    @staticmethod
    def _settle(call: Queued[Any], done: concurrent.futures.Future[Any]) -> None:
        if call.future.cancelled():
            if call.orphan is not None and done.exception() is None:
                call.orphan(done.result())
            return
        error = done.exception()
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(done.result())

    def _call_soon(self, callback: Callable[..., None], *args: Any,
                   loop: asyncio.AbstractEventLoop | None = None) -> None:
        try:
            (loop or self._loop).call_soon_threadsafe(callback, *args)  # type: ignore[union-attr]
        except (AttributeError, RuntimeError):
            pass  # no loop yet, or it closed: nobody waits

    # -- the write turn ---------------------------------------------------------

    @property
    def inline(self) -> bool:
        return bool(getattr(self._inline, "on", False))

    def take_turn(self) -> None:
        """Before ``BEGIN IMMEDIATE``: inline, the turn this board holds, or at once, else :class:`TurnTaken`.
        On the thread, nothing: a write gets there only from an inline attempt that had the turn (kept for
        it) or wrote without it. A board that waited :data:`TURN_PATIENCE` for the turn writes without it (see
        :meth:`_lose_patience`).

        :raises BackendUnavailable: the board closed."""
        if self.turn_fd < 0:
            raise BackendUnavailable("the board is not open")
        if self.inline and not self._held and not self._turnless:
            if self._waiting:
                raise TurnTaken
            try:
                fcntl.flock(self.turn_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise TurnTaken from None
            self._hold()
        self.writes += 1

    def _flock_waiting(self, fd: int) -> None:
        started = time.perf_counter()
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.turn_waits += 1
        self.turn_wait_s += time.perf_counter() - started

    def _wait_for_turn(self) -> None:
        """(Loop.) The waiter thread waits for the turn (on a duplicate of the descriptor: the same lock), then
        hands it to the loop, which runs the queue."""
        if self._waiting:
            return
        self._waiting = True
        loop = asyncio.get_running_loop()
        self._patience = loop.call_later(self.patience, self._lose_patience)
        if self._waiter is None:
            self._waiter = threading.Thread(target=self._wait_turns, name="jobboard-sqlite-turn", daemon=True)
            self._waiter.start()
        self._turn_requests.put((os.dup(self.turn_fd), loop))

    def _wait_turns(self) -> None:
        """(The waiter thread, a daemon: it may stay blocked on a turn that never comes.) One turn a request."""
        while (request := self._turn_requests.get()) is not None:
            fd, loop = request
            try:
                self._flock_waiting(fd)
            except OSError:
                os.close(fd)
                fd = -1
            try:
                loop.call_soon_threadsafe(self._granted, fd, time.perf_counter())
            except RuntimeError:  # the loop is gone
                if fd >= 0:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)

    def _granted(self, fd: int, got: float) -> None:
        self.grant_delay_s += time.perf_counter() - got
        self._waiting = self._turnless = False
        if self._patience is not None:
            self._patience.cancel()
            self._patience = None
        if fd >= 0:
            if self.turn_fd >= 0:
                self._hold()
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)  # closed meanwhile
            os.close(fd)  # the lock stays with the board's own descriptor (the same open file)
        self.drain()

    def _lose_patience(self) -> None:
        """(Loop.) The turn did not come in ``patience`` seconds (its holder may be stopped, SIGSTOP,
        between two writes): write without it, SQLite's own lock alone serializing, until it comes."""
        self._patience = None
        if self._waiting:
            self._turnless = True
            self.drain()

    def _hold(self) -> None:
        self._held, self._held_since = True, time.monotonic()
        self.turns += 1
        self._writes_seen = self.writes + 1  # the write taking the turn: only the writes after it keep it
        if self._release_at is None:
            self._release_at = asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        """(Loop, once per loop turn while held.) Give the turn back unless the board wrote since the last
        look and has held it less than ``hold_for``, or a call is on the thread (looked at again after it)."""
        self._release_at = None
        if not self._held or self._on_thread:
            return
        if self.writes != self._writes_seen and time.monotonic() - self._held_since < self.hold_for:
            self._writes_seen = self.writes
            self._release_at = asyncio.get_running_loop().call_soon(self._release)
            return
        self._give_back()

    def _give_back(self) -> None:
        if self._held:
            self._held = False
            self.held_s += time.monotonic() - self._held_since
            if self.turn_fd >= 0:
                fcntl.flock(self.turn_fd, fcntl.LOCK_UN)

    # -- closing ----------------------------------------------------------------

    def closed(self) -> None:
        """(Loop, after the connection closed.) The turn given back and its descriptor closed here, on the loop
        (closed on the thread, a release running on the loop could unlock a reused descriptor number); queued
        calls fail."""
        self._give_back()
        fd, self.turn_fd = self.turn_fd, -1
        files.close_turn(fd)
        self._turn_requests.put(None)  # the waiter thread ends (once any turn it waits for came)
        if self._patience is not None:
            self._patience.cancel()
            self._patience = None
        while self._queue:
            call = self._queue.popleft()
            if not call.future.done():
                call.future.set_exception(BackendUnavailable("the board closed"))
