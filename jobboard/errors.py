"""The one exception tree of jobboard.

Every error a board raises is a :class:`JobBoardError`; native exceptions of a
backend's client library are mapped with :func:`translate_errors` and kept as
``__cause__``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from jobboard.job import Job

E = TypeVar("E", bound=BaseException)


class JobBoardError(Exception):
    """Base class of every error raised by a job board."""


class JobNotFound(JobBoardError):
    """The job is not on the board (consumed, trashed, or never posted)."""


class NotClaimable(JobBoardError):
    """The job exists but cannot be claimed now (waiting for dependencies or delayed)."""


class AlreadyClaimed(NotClaimable):
    """Another claimer owns the job."""


class HeldBack(NotClaimable):
    """Flow control holds the job back: its name (or the board) is paused, or its group is at its limit.

    ``why`` is ``"paused"``, ``"concurrency"``, ``"sequence"`` or ``"rate"``; for a rate, ``retry_after``
    is the seconds until the group's next permit is due (by the backend's clock), else ``None``.
    """

    def __init__(self, message: str, *, why: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.why = why
        self.retry_after = retry_after


class NotOwner(JobBoardError):
    """The claim presented names an owner that does not hold the job."""


class ClaimLost(JobBoardError):
    """The claim is stale: settled, released, or the job was claimed again since."""


class BoardClosed(JobBoardError):
    """The board was used before it was opened or after it was closed."""


class BackendUnavailable(JobBoardError):
    """A transient backend failure (connection lost, timeout): retrying is fine."""


class UnknownOutcome(JobBoardError):
    """A write was sent, its reply was lost, and whether it was applied can no longer be told.

    Not transient: repeating the call could do the work twice. A post made with a
    ``key`` can be repeated safely (the key finds the first one if it was applied).
    """


class BoardConflict(JobBoardError):
    """The board's stored state contradicts the operation in a way retrying cannot fix
    (for example a kept result that already exists). The message names the node."""


class BackendNotFound(JobBoardError):
    """No installed backend serves the URL's scheme, or its extra is missing."""


class InvalidJob(JobBoardError):
    """A job's name, details, priority or options are not acceptable; nothing was written."""


class DependencyMissing(InvalidJob):
    """A posting names a dependency that is not on the board (consumed, trashed or never posted).

    From ``post``, nothing was written (``index`` is ``None``). From ``post_many`` the batch
    stopped at that posting: ``index`` is its place in the batch and ``posted`` the batch's jobs
    written before it, in order; it and the postings after it were not written.
    """

    def __init__(self, message: str, *, index: int | None = None, posted: Sequence[Job] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.posted: list[Job] = list(posted)

    @classmethod
    def of(cls, name: str, dependency: str) -> DependencyMissing:
        """The error for posting job ``name`` whose ``dependency`` (one id, or several joined) is missing."""
        return cls(f"job {name!r}: dependency {dependency} is not on the board (consumed, trashed or unknown)")

    def in_batch(self, index: int, posted: Sequence[Job]) -> DependencyMissing:
        """This error as ``post_many`` raises it: the posting's index named, the jobs before it kept."""
        return DependencyMissing(f"jobs[{index}]: {self}", index=index, posted=posted)


class Unsupported(JobBoardError):
    """The backend does not implement this optional operation (permanent: retrying cannot help)."""


class InvalidURL(JobBoardError):
    """A board URL could not be parsed, or has options its backend does not know."""


ErrorMapper = Callable[[BaseException], JobBoardError | None]
"""Maps a native exception to a jobboard error, or ``None`` to let it pass."""


@contextmanager
def translate_errors(mapper: ErrorMapper) -> Iterator[None]:
    """Re-raise native exceptions as the :class:`JobBoardError` that ``mapper`` names.

    The native exception is kept as ``__cause__``. Exceptions already in the
    tree and those the mapper returns ``None`` for propagate unchanged.
    """
    try:
        yield
    except JobBoardError:
        raise
    except Exception as native:
        mapped = mapper(native)
        if mapped is None:
            raise
        raise mapped from native


def found_in(group: BaseExceptionGroup[BaseException], kind: type[E]) -> E | None:
    """The first exception of ``kind`` among ``group``'s leaves (nested groups searched), or ``None``: how a
    task group's failure is given to a caller promised one error."""
    for error in group.exceptions:
        if isinstance(error, kind):
            return error
        if isinstance(error, BaseExceptionGroup) and (inner := found_in(error, kind)) is not None:
            return inner
    return None
