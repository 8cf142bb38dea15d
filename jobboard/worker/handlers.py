"""What a worker runs: handlers, their context, and a registry that routes by job name.

A handler is an async callable taking a :class:`JobContext`; a plain (sync)
function is run in a worker thread so that blocking code cannot stall the event
loop (and the backend session's pings). A :class:`Handlers` registry also
carries per-handler options (retry policy, timeout), start-up and shut-down
hooks and middleware, so that ``jobboard worker --handlers app.jobs:handlers``
gets them all.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

import anyio.to_thread

from jobboard.board.checks import TIMEOUT_KEY
from jobboard.board.contract import JobBoard
from jobboard.job import Claim, Job
from jobboard.plans.posting import TaskFunction, task_arguments
from jobboard.worker.retry import Fail, Retry, RetryPolicy

__all__ = ["TIMEOUT_KEY", "Fail", "Handler", "HandlerOptions", "Handlers", "Hook", "JobContext", "Middleware", "Retry",
           "RetryPolicy", "as_async"]


@dataclass(frozen=True)
class JobContext:
    """What a handler gets: the claim and its job, the worker's shared state, a heartbeat for leases."""

    claim: Claim
    board: JobBoard
    _beat: Callable[[], None] = field(repr=False, default=lambda: None)
    shared: dict[str, Any] = field(default_factory=dict, repr=False)
    """The worker's shared state: what ``on_startup`` hooks put there (pools, clients)."""
    _progress: Callable[[float, str], None] = field(repr=False, default=lambda fraction, note: None)

    @property
    def job(self) -> Job:
        return self.claim.job

    @property
    def details(self) -> Mapping[str, Any]:
        return self.claim.job.details

    @property
    def dependency_results(self) -> tuple[Any, ...]:
        """Results of the job's dependencies, in ``depends_on`` order."""
        return self.claim.dependency_results

    @property
    def attempt(self) -> int:
        return self.claim.attempt

    @property
    def generation(self) -> int:
        """The claim's fencing token: pass it to systems that must refuse a stale worker."""
        return self.claim.generation

    def progress(self, fraction: float, note: str = "") -> None:
        """Report how far the job is (0.0 to 1.0, and a short note); readers see it in ``Job.progress``.

        Cheap: call it as often as you like (also from a sync handler's thread). The worker
        writes the latest value to the board at most once a second while the claim holds.

        :raises InvalidJob: ``fraction`` not in 0..1, or ``note`` not a string.
        """
        self._progress(fraction, note)

    def heartbeat(self) -> None:
        """Show progress: renews the claim's lease when the worker renews on heartbeats."""
        self._beat()


Handler = Callable[[JobContext], Awaitable[Any]]
"""An async callable taking a :class:`JobContext`, returning the (msgpack-encodable) result."""
Hook = Callable[[dict[str, Any]], Awaitable[None]]
"""``on_startup`` / ``on_shutdown``: gets the worker's shared state (a dict) to fill or clean up."""
Middleware = Callable[[JobContext, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Wraps each job: ``async def mw(ctx, call_next): ...; return await call_next()``."""


def as_async(function: Callable[[JobContext], Any]) -> Handler:
    """``function`` itself if it is async; else a handler running it in a worker thread.

    A cancelled thread cannot be stopped: the job is settled (or given up) at
    once and the thread's eventual result is ignored.
    """
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__):
        return function

    def tracked(context: JobContext) -> Any:
        try:
            return function(context)
        finally:
            THREADS_RUNNING.discard(claim_of(context))

    @functools.wraps(function)
    async def in_thread(context: JobContext) -> Any:
        THREADS_RUNNING.add(claim_of(context))  # until the thread returns (cancelled, it runs on)
        return await anyio.to_thread.run_sync(tracked, context, abandon_on_cancel=True)

    return in_thread


THREADS_RUNNING: set[tuple[str, int]] = set()
"""(job id, claim generation) of the plain ``def`` handlers whose thread still runs (one cancelled goes on in its
thread: a stop gives its job back *counted*, so a handler whose thread never ends cannot come back for ever)."""


def claim_of(context: JobContext) -> tuple[str, int]:
    return context.claim.job.id, context.claim.generation


@dataclass(frozen=True, slots=True)
class HandlerOptions:
    """Per-handler settings; ``None`` means the worker's."""

    retry: RetryPolicy | None = None
    timeout: float | None = None
    """Seconds the handler may run before it is cancelled (a ``TimeoutError`` for the policy)."""


class Handlers:
    """Handlers by job name. A ``Handlers`` is itself a handler that routes by name::

        handlers = Handlers()

        @handlers.register("resize", timeout=60, retry=RetryPolicy(max_attempts=3))
        async def resize(ctx: JobContext) -> dict[str, int]:
            ...
    """

    def __init__(self) -> None:
        self._by_name: dict[str, Handler] = {}
        self._options: dict[str, HandlerOptions] = {}
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self.middleware: list[Middleware] = []

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def options(self, name: str) -> HandlerOptions:
        """The options registered with the handler for ``name`` (defaults if none)."""
        return self._options.get(name, HandlerOptions())

    @overload
    def register(self, name: str, *, retry: RetryPolicy | None = None,
                 timeout: float | None = None) -> Callable[[Handler], Handler]: ...

    @overload
    def register(self, name: str, handler: Callable[[JobContext], Any], *, retry: RetryPolicy | None = None,
                 timeout: float | None = None) -> Handler: ...

    def register(
        self, name: str, handler: Callable[[JobContext], Any] | None = None, *,
        retry: RetryPolicy | None = None, timeout: float | None = None,
    ) -> Handler | Callable[[Handler], Handler]:
        """Register ``handler`` for jobs called ``name`` (directly, or as a decorator).

        A sync function is run in a worker thread. ``retry`` and ``timeout``
        override the worker's for these jobs.

        :raises ValueError: a handler is registered for ``name`` already, or a bad timeout.
        """
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")

        def add(function: Callable[[JobContext], Any]) -> Handler:
            if name in self._by_name:
                raise ValueError(f"a handler for {name!r} is registered already")
            self._by_name[name] = as_async(function)
            self._options[name] = HandlerOptions(retry, timeout)
            return function

        return add if handler is None else add(handler)

    def on_startup(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(shared)`` before the worker claims anything (open pools here)."""
        self.startup.append(hook)
        return hook

    def on_shutdown(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(shared)`` after the worker's last job settled (close pools here)."""
        self.shutdown.append(hook)
        return hook

    def wrap(self, middleware: Middleware) -> Middleware:
        """Decorator: run ``middleware(ctx, call_next)`` around every job (first registered is outermost)."""
        self.middleware.append(middleware)
        return middleware

    def task(self, name: str) -> Callable[[TaskFunction], TaskFunction]:
        """Register a plan task function, called as ``function(*args, *results of after)``."""
        def add(function: TaskFunction) -> TaskFunction:
            async def run(context: JobContext) -> Any:
                return await function(*task_arguments(context.details, context.job, context.dependency_results))

            self.register(name, run)
            return function

        return add

    async def __call__(self, context: JobContext) -> Any:
        """Run the handler registered for the job's name.

        :raises LookupError: no handler for that name.
        """
        handler = self._by_name.get(context.job.name)
        if handler is None:
            raise LookupError(f"no handler for jobs named {context.job.name!r}")
        return await handler(context)
