"""The contract's methods on progress and the trash (``report_progress``, ``purge``, ``requeue``), and
``could_be_job_id``.

Their defaults raise :class:`~jobboard.errors.Unsupported` (``could_be_job_id``: says ``True``), so a
backend written before them still loads; the in-tree backends implement them all.
"""

from __future__ import annotations

import abc

from jobboard.board_inputs import JobRef
from jobboard.errors import Unsupported
from jobboard.job import Claim, Job


class TrashAndProgress(abc.ABC):  # noqa: B024 - every method has a default: a backend may implement none
    """Progress of claimed jobs, emptying and undoing the trash; mixed into :class:`~jobboard.board.JobBoard`."""

    def could_be_job_id(self, job_id: str) -> bool:
        """``False`` when ``job_id`` is not of the form this backend gives its ids: no job was ever
        posted under it here. No I/O, never raises.

        A board keeps nothing of a consumed job (but a kept result), so ``state()`` of an id that
        left the board says ``COMPLETE`` whether it was consumed or never posted; this tells a
        mistyped id from a finished job. The default says ``True`` of every id but the empty one
        (the backend does not tell).
        """
        return job_id != ""

    async def never_posted(self, job_id: str) -> bool:
        """``True`` when no job was ever posted on this board under ``job_id``: it is not of the
        form of the board's ids (:meth:`could_be_job_id`), or past the last id the board has
        given. ``False`` when one may have been (the backend cannot tell a consumed job from
        nothing). One read at most; the answer holds when it was read (a post may give the id
        a moment later).
        """
        return not self.could_be_job_id(job_id)

    async def report_progress(self, claim: Claim, fraction: float, note: str = "") -> None:
        """Store how far the claimed job is, with its claim: ``Job.progress`` shows it to every reader.

        Fenced like a settle. One backend write per call: callers that report
        often coalesce (a worker's ``JobContext.progress`` writes at most once
        a second). The progress goes when the claim does (settled or released).

        :raises ClaimLost: the claim is not current (nothing is written).
        :raises NotOwner: the claim's owner does not hold the job.
        :raises InvalidJob: ``fraction`` not in 0..1, or ``note`` not a string.
        """
        raise Unsupported(f"{type(self).__name__} does not store progress")

    async def purge(self, *, older_than: float = 0.0) -> int:
        """Remove from the trash every job trashed at least ``older_than`` seconds ago; return how many.

        Each removal is atomic; a purge running beside a requeue removes or
        requeues a job, never both.

        :raises InvalidJob: ``older_than`` is negative or not a number.
        """
        raise Unsupported(f"{type(self).__name__} cannot purge its trash")

    async def requeue(self, job: JobRef, *, reset_attempts: bool = False) -> Job:
        """Move a trashed job back on the board as ``UNCLAIMED``, keeping its id; return it.

        Atomic: the job leaves the trash in the same write that puts it back.
        It keeps its posting order (an old job goes before newer ones of its
        priority), details, key and ``last_error``; it is claimable at once.
        ``reset_attempts`` counts its attempts from 0 again (otherwise a job
        trashed for "max attempts exceeded" is trashed again at its next claim).
        Dependents that were trashed with it stay in the trash.

        :raises JobNotFound: the job is not in the trash.
        :raises InvalidJob: the job waits for a dependency whose result never came
            (a dependent trashed with its dependency): post it again instead.
        """
        raise Unsupported(f"{type(self).__name__} cannot requeue from its trash")
