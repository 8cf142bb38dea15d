"""How a handler's outcome settles its job: a pure decision, no I/O."""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass
from typing import Any

from jobboard.handlers import Retry
from jobboard.job import Claim

MAX_REASON_LENGTH = 8000


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


def decide(
    claim: Claim, *, result: Any = None, error: BaseException | None = None,
    max_attempts: int | None = None, failure_delay: float = 0.0,
) -> Settlement:
    """Turn a handler's result or exception into a settlement.

    * it returned: consume with the result;
    * it raised :class:`Retry`: abandon, claimable again after ``Retry.delay``;
    * it raised anything else: abandon after ``failure_delay``; on the last
      allowed attempt (the job's ``max_attempts``, else ``max_attempts`` here)
      trash it, with the error type, message and traceback as the reason.
    """
    if error is None:
        return Settlement(Action.CONSUME, result=result)
    if isinstance(error, Retry):
        return Settlement(Action.ABANDON, retry_after=error.delay, reason=str(error))
    limit = claim.job.max_attempts if claim.job.max_attempts is not None else max_attempts
    reason = describe(error)
    if limit is not None and claim.attempt >= limit:
        return Settlement(Action.TRASH, reason=f"failed on attempt {claim.attempt} of {limit}: {reason}")
    return Settlement(Action.ABANDON, retry_after=failure_delay or None, reason=reason)


def describe(error: BaseException) -> str:
    """``Type: message`` then the traceback, cut to a size a trash record can carry."""
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    text = f"{type(error).__name__}: {error}\n{''.join(lines)}"
    return text if len(text) <= MAX_REASON_LENGTH else text[:MAX_REASON_LENGTH] + "\n[cut]"
