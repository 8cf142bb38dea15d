"""A running job's guards: the tasks beside its handler (the claim's watch, the lease's keeper, the progress
writer), run in the worker's task group, not in a task group of the job's own.

The job's slot closes its guards when the handler ends and goes on without waiting for them to end: each is
cancelled, and one whose first turn comes after the close does nothing at all. So a short handler (one that
never waited) costs each guard a task step, and its slot no event-loop iteration: a task group of the job's
own made the slot wait for its guards' cancellation, which anyio delivers over several iterations (five of the
eight a one-slot worker spent per job; 11 callbacks a job, now 5). The one thing a slot waits for is a guard
*holding* the job: the lease keeper's abandon of a claim whose lease ran out, which the job's end must not
overtake. A handler cancelled (its claim lost, the worker stopping now) cancels its guards at once, not when
its cancellation has run its course: a cleanup outlasting the lease is no lost lease.

Atomic by the event loop: a guard checks :attr:`Guards.closed` after each wait before it acts, and a close and
a guard's step never interleave.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio
from anyio.abc import TaskGroup


class Guards:
    """The guard tasks of one running job, started among ``tasks``; see the module docstring."""

    def __init__(self, tasks: TaskGroup) -> None:
        self._tasks = tasks
        self._scopes: list[anyio.CancelScope] = []
        self._holding = 0
        self._let_go: anyio.Event | None = None
        self.closed = False
        """The handler has ended: a guard's turn from now on does nothing."""

    def start_soon(self, guard: Callable[[], Awaitable[None]]) -> None:
        """Run ``guard()`` in a task of its own until it returns or the guards close (none once closed; on the
        event loop: anyio starts tasks from tasks only)."""
        if not self.closed:
            self._tasks.start_soon(self._run, guard)

    async def _run(self, guard: Callable[[], Awaitable[None]]) -> None:
        if self.closed:  # the handler ended before this guard's first turn
            return
        with anyio.CancelScope() as scope:
            self._scopes.append(scope)
            await guard()

    @contextmanager
    def holding(self) -> Iterator[None]:
        """A guard's section that :meth:`close` waits for (enter it only while not :attr:`closed`)."""
        assert not self.closed, "a guard holds the job only while the handler runs"
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if self._holding == 0 and self._let_go is not None:
                self._let_go.set()

    def cancel(self) -> None:
        """Cancel every guard, now and from now on (the handler is being cancelled, or has ended); a guard
        :meth:`holding` the job goes on (its section is shielded)."""
        self.closed = True
        for scope in self._scopes:
            scope.cancel()

    async def close(self) -> None:
        """:meth:`cancel`, then wait (shielded) only for the guards :meth:`holding` the job. No checkpoint when
        none holds it."""
        self.cancel()
        if self._holding:
            self._let_go = anyio.Event()
            with anyio.CancelScope(shield=True):
                await self._let_go.wait()
