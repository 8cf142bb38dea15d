"""What a worker runs: handlers, their context, and a registry that routes by job name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from jobboard.board import JobBoard
from jobboard.job import Claim, Job


class Retry(Exception):
    """Raise from a handler to put the job back, claimable again after ``delay`` seconds.

    The attempt still counts toward the job's ``max_attempts``.
    """

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        super().__init__(reason or f"retry in {delay}s")
        if delay < 0:
            raise ValueError("Retry delay must be >= 0 seconds")
        self.delay = delay


@dataclass(frozen=True)
class JobContext:
    """What a handler gets: the claim and its job, plus a heartbeat for leases."""

    claim: Claim
    board: JobBoard
    _beat: Callable[[], None] = field(repr=False, default=lambda: None)

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

    def heartbeat(self) -> None:
        """Show progress: renews the claim's lease when the worker renews on heartbeats."""
        self._beat()


Handler = Callable[[JobContext], Awaitable[Any]]
TaskFunction = Callable[..., Awaitable[Any]]
"""A plan task: called with its arguments, then its dependencies' results."""
"""An async callable taking a :class:`JobContext`, returning the (msgpack-encodable) result."""


def task_arguments(args: list[Any], gate: str | None, job: Job, results: tuple[Any, ...]) -> list[Any]:
    """A plan task's call arguments: its own, then its dependencies' results (the gate's left out)."""
    return [*args, *(result for dep, result in zip(job.depends_on, results, strict=True) if dep != gate)]


class Handlers:
    """Handlers by job name. A ``Handlers`` is itself a handler that routes by name::

        handlers = Handlers()

        @handlers.register("resize")
        async def resize(ctx: JobContext) -> dict[str, int]:
            ...
    """

    def __init__(self) -> None:
        self._by_name: dict[str, Handler] = {}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    @overload
    def register(self, name: str) -> Callable[[Handler], Handler]: ...

    @overload
    def register(self, name: str, handler: Handler) -> Handler: ...

    def register(self, name: str, handler: Handler | None = None) -> Handler | Callable[[Handler], Handler]:
        """Register ``handler`` for jobs called ``name`` (directly, or as a decorator).

        :raises ValueError: a handler is registered for ``name`` already.
        """
        def add(function: Handler) -> Handler:
            if name in self._by_name:
                raise ValueError(f"a handler for {name!r} is registered already")
            self._by_name[name] = function
            return function

        return add if handler is None else add(handler)

    def task(self, name: str) -> Callable[[TaskFunction], TaskFunction]:
        """Register a plan task function, called as ``function(*args, *results of after)``."""
        def add(function: TaskFunction) -> TaskFunction:
            async def run(context: JobContext) -> Any:
                details = context.details
                arguments = task_arguments(list(details.get("args", [])), details.get("gate"),
                                           context.job, context.dependency_results)
                return await function(*arguments)

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
