"""How failing work is retried, and how a handler's outcome settles its job: exponential back-off, a job's
retry policy, the exceptions a handler raises to steer it, and :func:`decide` (a pure decision, no I/O)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from jobboard.backend import SettleAction
from jobboard.job import Claim, LastError

DEFAULT_MAX_ATTEMPTS = 5


def exponential_delay(step: int, initial: float, factor: float, maximum: float, jitter: float,
                      rng: random.Random | None = None) -> float:
    """``initial`` × ``factor`` ** ``step``, at most ``maximum``, scaled down by a random factor in
    ``[1 - jitter, 1]`` (``jitter`` 0: exact), so that failing callers do not come back in lockstep."""
    try:
        base = min(maximum, initial * factor ** step)
    except OverflowError:  # factor ** step is past any float, and so past maximum
        base = maximum if initial else 0.0
    return base * (rng or random).uniform(1 - jitter, 1.0) if jitter else base


class Backoff:
    """Delays between tries of one thing (a settle, a claim, a registration): :func:`exponential_delay`
    of the tries since the last :meth:`reset`."""

    def __init__(self, initial: float, factor: float, maximum: float, jitter: float = 0.0) -> None:
        self.initial, self.factor, self.maximum, self.jitter = initial, factor, maximum, jitter
        self.attempts = 0

    def next(self) -> float:
        """The delay before the next try (the first is ``initial``, less its jitter)."""
        delay = exponential_delay(self.attempts, self.initial, self.factor, self.maximum, self.jitter)
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0


class Retry(Exception):
    """Raise from a handler to put the job back, claimable again after ``delay`` seconds.

    The attempt still counts toward the job's ``max_attempts``.
    """

    def __init__(self, delay: float = 0.0, reason: str = "") -> None:
        super().__init__(reason or f"retry in {delay}s")
        if delay < 0:
            raise ValueError("Retry delay must be >= 0 seconds")
        self.delay = delay


class Fail(Exception):
    """Raise from a handler to trash the job at once with ``reason`` (no further attempt)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how soon a failed job is tried again.

    The defaults are safe: at most 5 attempts, then the trash; between them
    exponential back-off 1 s, 2 s, 4 s, 8 s ... (at most ``max_delay``), each
    delay scaled down by a random factor in ``[1 - jitter, 1]`` so that
    failing jobs do not come back in lockstep.
    """

    max_attempts: int | None = DEFAULT_MAX_ATTEMPTS
    """Attempts before a failing job is trashed, for jobs posted without their own
    ``max_attempts`` (which wins). ``None``: retry forever (still with back-off)."""
    initial_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.5
    """Fraction of each delay that is random (0: exact delays)."""
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Errors worth another attempt; any other error trashes the job at once."""
    never_retry: tuple[type[BaseException], ...] = field(default=())
    """Errors that trash the job at once even if ``retry_on`` matches them."""

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (or None for no limit)")
        if self.initial_delay < 0 or self.max_delay < 0 or self.factor < 1:
            raise ValueError("delays must be >= 0 and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
        return exponential_delay(max(0, attempt - 1), self.initial_delay, self.factor, self.max_delay, self.jitter, rng)

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is worth another attempt."""
        return isinstance(error, self.retry_on) and not isinstance(error, self.never_retry)

    def limit(self, job_max_attempts: int | None) -> int | None:
        """The attempts a job gets: its own ``max_attempts``, else this policy's."""
        return job_max_attempts if job_max_attempts is not None else self.max_attempts


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to do with a claim once its handler is done (the board's :class:`~jobboard.backend.Settle`, before
    the board checks and encodes it)."""

    action: SettleAction
    result: Any = None
    retry_after: float | None = None
    reason: str = ""
    error: LastError | None = None
    """Stored with the job as its ``last_error`` (abandon and trash)."""
    release: bool = False
    """An abandon made by ``board.release`` (a stop interrupted the handler): uncounted where the board can."""

    @property
    def outcome(self) -> str:
        """The word logged for this settlement: ``consumed``, ``retried`` or ``failed``."""
        return {SettleAction.CONSUME: "consumed", SettleAction.ABANDON: "retried", SettleAction.TRASH: "failed"}[self.action]


def decide(
    claim: Claim, *, result: Any = None, error: BaseException | None = None,
    policy: RetryPolicy = DEFAULT_POLICY, now: float | None = None,
) -> Settlement:
    """Turn a handler's result or exception into a settlement.

    * it returned: consume with the result;
    * it raised :class:`Retry`: abandon, claimable again after ``Retry.delay``;
    * it raised :class:`Fail`, or an error the policy does not retry: trash at once;
    * it raised anything else: abandon after the policy's back-off delay; on the
      last allowed attempt (the job's ``max_attempts``, else the policy's) trash
      it. The reason is the error type and message on one line; the traceback is
      in the settlement's ``error`` (the job's ``last_error``).
    """
    if error is None:
        return Settlement(SettleAction.CONSUME, result=result)
    last = LastError.from_exception(error, claim.attempt, now if now is not None else time.time())
    if isinstance(error, Retry):
        return Settlement(SettleAction.ABANDON, retry_after=error.delay, reason=str(error), error=last)
    if isinstance(error, Fail):
        return Settlement(SettleAction.TRASH, reason=f"failed: {error.reason}", error=last)
    reason = last.summary_line()
    if not policy.retries(error):
        return Settlement(SettleAction.TRASH, reason=f"failed on attempt {claim.attempt}, not retried: {reason}",
                          error=last)
    limit = policy.limit(claim.job.max_attempts)
    if limit is not None and claim.attempt >= limit:
        return Settlement(SettleAction.TRASH, reason=f"failed on attempt {claim.attempt} of {limit}: {reason}",
                          error=last)
    return Settlement(SettleAction.ABANDON, retry_after=policy.delay(claim.attempt) or None, reason=reason, error=last)
