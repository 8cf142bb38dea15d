"""A board wrapper that injects faults, seeded, to drive a worker through every error path.

``FaultyBoard(inner, seed=..., rate=...)`` is a board over ``inner``'s backend wrapped in a
:class:`FaultyBackend`: the fault is injected between the board and the backend, for every backend alike;
the calls a worker makes (``claim_next``, ``wait``, ``watch_claim``,
``consume``, ``abandon``, ``trash``, entity registration) fail now and then,
chosen by a ``random.Random(seed)``, in one of these ways:

* ``unavailable``: raise :class:`~jobboard.errors.BackendUnavailable` before the call;
* ``timeout``: raise :class:`TimeoutError` before the call;
* ``hang``: sleep ``hang_for`` seconds (past the caller's timeout), then make the call;
* ``lost_reply`` (settles only): make the call, then raise ``BackendUnavailable``
  (the write applied, the caller cannot know);
* ``claim_lost`` (settles only): release the claim, then raise
  :class:`~jobboard.errors.ClaimLost` (as after an expired session).

``methods`` and ``kinds`` narrow what is injected; ``budget`` caps how many faults.

:attr:`injected` counts the faults by ``(method, kind)``; :attr:`applied`
records every settle that reached the inner board and returned, as
``(method, job id, generation, time.monotonic())``, so tests can check what really happened.
For tests and for trying a worker's resilience; never for production.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeVar

import anyio

from jobboard.backend import Backend, Settle, SettleAction
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, ClaimLost
from jobboard.job import Claim, Job, Progress
from jobboard.wrappers.wrapped import WrappedBackend

T = TypeVar("T")
KINDS = ("unavailable", "timeout", "hang")
SETTLE_KINDS = (*KINDS, "lost_reply", "claim_lost")
FAULTY_METHODS = frozenset({"claim_next", "wait", "watch_claim", "consume", "abandon", "trash",
                            "register_entity", "unregister_entity"})


class FaultyBackend(WrappedBackend):
    """Forwards to ``inner``, injecting faults; see the module docstring."""

    def __init__(self, inner: Backend, *, seed: int, rate: float = 0.1, hang_for: float = 0.5,
                 methods: Collection[str] = FAULTY_METHODS, kinds: Collection[str] = SETTLE_KINDS,
                 budget: int | None = None) -> None:
        super().__init__(inner)
        self.seed, self.rate, self.hang_for = seed, rate, hang_for
        self.methods, self.kinds = frozenset(methods), tuple(kinds)
        self.budget = budget
        """Faults left to inject (``None``: no limit)."""
        self.enabled = True
        self.random = random.Random(seed)
        self.injected: Counter[tuple[str, str]] = Counter()
        self.applied: list[tuple[str, str, int, float]] = []
        self.lost_replies: Counter[str] = Counter()
        """Calls that applied but whose caller got ``BackendUnavailable``, by method."""

    async def _call(self, method: str, call: Callable[[], Awaitable[T]], *, settle: Claim | None = None) -> T:
        kind = self._pick(method, settle is not None)
        if kind is not None:
            self.injected[(method, kind)] += 1
        if kind == "unavailable":
            raise BackendUnavailable(f"injected: {method} could not reach the backend (seed {self.seed})")
        if kind == "timeout":
            raise TimeoutError(f"injected: {method} timed out (seed {self.seed})")
        if kind == "hang":
            await anyio.sleep(self.hang_for)
        if kind == "claim_lost" and settle is not None:
            await self.inner.settle(settle, Settle(SettleAction.ABANDON))
            raise ClaimLost(f"injected: claim of job {settle.job.id} lost (seed {self.seed})")
        result = await call()
        if settle is not None:
            self.applied.append((method, settle.job.id, settle.generation, time.monotonic()))
        if kind == "lost_reply":
            self.lost_replies[method] += 1
            raise BackendUnavailable(f"injected: the reply to {method} was lost (seed {self.seed})")
        return result

    def _pick(self, method: str, settle: bool) -> str | None:
        if not self.enabled or method not in self.methods or self.budget == 0:
            return None
        if self.random.random() >= self.rate:
            return None
        kinds = [kind for kind in self.kinds if settle or kind in KINDS]
        if not kinds:
            return None
        if self.budget is not None:
            self.budget -= 1
        return self.random.choice(kinds)

    # -- what a worker calls: faults injected ------------------------------------------

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        return await self._call("claim_next", lambda: self.inner.claim_next(owner, names))

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        return await self._call("wait", lambda: self.inner.wait(names))

    async def watch_claim(self, claim: Claim) -> str:
        return await self._call("watch_claim", lambda: self.inner.watch_claim(claim))

    async def settle(self, claim: Claim, settle: Settle) -> None:
        await self._call(settle.action.value, lambda: self.inner.settle(claim, settle), settle=claim)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        await self._call("report_progress", lambda: self.inner.report_progress(claim, progress))

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        await self._call("register_entity", lambda: self.inner.register_entity(name, metadata, encoded))

    async def unregister_entity(self, name: str) -> None:
        await self._call("unregister_entity", lambda: self.inner.unregister_entity(name))


class FaultyBoard(JobBoard):
    """A board over ``inner``'s backend wrapped in a :class:`FaultyBackend` (``inner`` stays usable,
    without faults; the two share the backend and its events)."""

    backend: FaultyBackend

    def __init__(self, inner: JobBoard, **faults: Any) -> None:
        self.inner = inner
        super().__init__(FaultyBackend(inner.backend, **faults))

    @property
    def injected(self) -> Counter[tuple[str, str]]:
        """Faults injected, by ``(method, kind)``."""
        return self.backend.injected

    @property
    def applied(self) -> list[tuple[str, str, int, float]]:
        """Every settle that reached the backend and returned: ``(method, job id, generation, monotonic time)``."""
        return self.backend.applied

    @property
    def lost_replies(self) -> Counter[str]:
        return self.backend.lost_replies

    @property
    def enabled(self) -> bool:
        return self.backend.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.backend.enabled = value

    @property
    def budget(self) -> int | None:
        return self.backend.budget
