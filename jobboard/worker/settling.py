"""Settles a slot does not wait for (a worker with ``prefetch``): the slot starts its next held job as soon as
the finished job's settle is sent, not when its reply arrives, as AMQP's acknowledgements go.

The settle runs in a task of its own (the same :meth:`~jobboard.worker.running.JobRunner.settle`: shielded,
retried on ``BackendUnavailable``, a ``ClaimLost`` counted as lost, the outcome counted and logged when its
reply comes). The settles go out in the order the jobs ended, on the board's connection, so nothing is delayed
on the server; at most ``bound`` are in flight beyond the running jobs: a slot whose job ends with ``bound``
in flight waits for one of them to end. ``concurrency`` still bounds the handlers running at once, and the
worker's drain at the stop waits for the settles in flight (each stays in ``Worker.running`` until settled).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup


class SettlesInFlight:
    """At most ``bound`` settles running apart from their slots; see the module docstring.

    Atomic by the event loop: a settle's token is taken before its task starts and given back when it ends."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._tokens = anyio.Semaphore(bound)
        self.in_flight = 0
        self.most = 0
        """The most settles seen in flight at once (never above ``bound``)."""
        self.handed = 0
        """Settles handed off so far."""

    async def hand_off(self, tasks: TaskGroup, settle: Callable[[], Awaitable[None]], ended: Callable[[], None]) -> None:
        """Start ``settle()`` in its own task among ``tasks`` once fewer than ``bound`` are in flight, then
        ``ended()``; the wait is shielded (the job's handler is done: its settle must not be lost to a cancel)."""
        with anyio.CancelScope(shield=True):
            await self._tokens.acquire()
        self.in_flight += 1
        self.handed += 1
        self.most = max(self.most, self.in_flight)
        tasks.start_soon(self._run, settle, ended)

    async def _run(self, settle: Callable[[], Awaitable[None]], ended: Callable[[], None]) -> None:
        try:
            await settle()
        finally:
            self.in_flight -= 1
            self._tokens.release()
            ended()
