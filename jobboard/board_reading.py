"""The contract's reads: one job, the board in order, state, owner, count and the trash.

Mixed into :class:`~jobboard.board.JobBoard`; every method but ``listing`` is abstract. Reads are
snapshots: nothing is held between two of them.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator

from jobboard.board_inputs import JobRef
from jobboard.job import Job, JobState, ListedJob, TrashedJob


class BoardReading(abc.ABC):
    """What a board holds, read without changing it."""

    @abc.abstractmethod
    async def get(self, job: JobRef) -> Job:
        """A fresh snapshot of a job on the board (not in the trash).

        :raises JobNotFound: the job is not on the board.
        """

    @abc.abstractmethod
    def iterjobs(self, *, only_unclaimed: bool = False) -> AsyncIterator[Job]:
        """Iterate the jobs on the board: higher priority first, then oldest first.

        ``only_unclaimed`` keeps jobs in state ``UNCLAIMED`` (delayed ones
        included). Entries that are not valid postings are skipped and reported
        as ``MALFORMED`` events; they never end the iteration.
        """

    async def listing(self, *, only_unclaimed: bool = False) -> AsyncIterator[ListedJob]:
        """Iterate the jobs on the board like :meth:`iterjobs`, each with its state and owner.

        Each entry is a snapshot; entries are not one atomic picture of the board
        (a job may be settled between two of them). This default reads the state
        and owner of each job; backends override it to read them with the jobs.
        """
        async for job in self.iterjobs(only_unclaimed=only_unclaimed):
            state = await self.state(job)
            if state in (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING):
                yield ListedJob(job, state, await self.owner(job) if state is JobState.CLAIMED else None)

    @abc.abstractmethod
    async def state(self, job: JobRef) -> JobState:
        """Where the job stands. A job neither on the board nor in the trash is ``COMPLETE``."""

    @abc.abstractmethod
    async def owner(self, job: JobRef) -> str | None:
        """The current owner, or ``None`` when the job is not claimed (or not on the board)."""

    @abc.abstractmethod
    async def job_count(self) -> int:
        """How many jobs are on the board (unclaimed, claimed and waiting)."""

    @abc.abstractmethod
    def trashed(self) -> AsyncIterator[TrashedJob]:
        """Iterate the trash, oldest first, with the reason of each."""
