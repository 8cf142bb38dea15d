"""How a handler's outcome settles its job: a pure decision, no I/O."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any

from jobboard.job import Claim, LastError
from jobboard.worker.retry import Fail, Retry, RetryPolicy

DEFAULT_POLICY = RetryPolicy()


class Action(enum.Enum):
    CONSUME = "consume"
    ABANDON = "abandon"
    TRASH = "trash"


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to do with a claim once its handler is done."""

    action: Action
    result: Any = None
    retry_after: float | None = None
    reason: str = ""
    error: LastError | None = None
    """Stored with the job as its ``last_error`` (abandon and trash)."""

    @property
    def outcome(self) -> str:
        """The word logged for this settlement: ``consumed``, ``retried`` or ``failed``."""
        return {Action.CONSUME: "consumed", Action.ABANDON: "retried", Action.TRASH: "failed"}[self.action]


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
        return Settlement(Action.CONSUME, result=result)
    last = LastError.from_exception(error, claim.attempt, now if now is not None else time.time())
    if isinstance(error, Retry):
        return Settlement(Action.ABANDON, retry_after=error.delay, reason=str(error), error=last)
    if isinstance(error, Fail):
        return Settlement(Action.TRASH, reason=f"failed: {error.reason}", error=last)
    reason = last.summary_line()
    if not policy.retries(error):
        return Settlement(Action.TRASH, reason=f"failed on attempt {claim.attempt}, not retried: {reason}",
                          error=last)
    limit = policy.limit(claim.job.max_attempts)
    if limit is not None and claim.attempt >= limit:
        return Settlement(Action.TRASH, reason=f"failed on attempt {claim.attempt} of {limit}: {reason}",
                          error=last)
    return Settlement(Action.ABANDON, retry_after=policy.delay(claim.attempt) or None, reason=reason, error=last)
