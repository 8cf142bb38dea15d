"""Steps of the model-based test that only read, wait or are refused (and closing or reopening a board)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

import anyio

from jobboard.board.contract import JobBoard
from jobboard.errors import BoardClosed, JobNotFound
from jobboard.job import JobState
from jobboard.testing._machine import NAME_FILTERS, MachineBase

UNKNOWN_JOB = "no-such-job"


class Probes(MachineBase):
    """Each probe takes a board and a pick, and says whether it had something to probe."""

    claim_next_best_first: ClassVar[bool]
    """See :class:`~jobboard.testing.stateful.JobBoardMachine`."""

    def close_or_reopen(self, slot: int) -> None:
        if self.boards[slot] is None:
            self.note("reopen a board")
            self.open_slot(slot)
        elif len(self.open_boards()) > 1:
            self.note("close a board")
            self.close_slot(slot)

    def returns_soon(self, work: Callable[[], Awaitable[object]]) -> bool:
        """Whether ``work()`` returns within 50 ms (for calls that must block)."""

        async def returns() -> bool:
            with anyio.move_on_after(0.05):
                await work()
                return True
            return False

        return self.call(returns)

    def unknown_job(self, board: JobBoard, pick: int) -> bool:
        self.expect_error(JobNotFound, lambda: board.claim(UNKNOWN_JOB, "w1"))
        self.expect_error(JobNotFound, lambda: board.cancel(UNKNOWN_JOB, "r"))
        self.expect_error(JobNotFound, lambda: board.get(UNKNOWN_JOB))
        assert self.call(lambda: board.state(UNKNOWN_JOB)) is JobState.COMPLETE
        assert self.call(lambda: board.owner(UNKNOWN_JOB)) is None
        return True

    def closed_board(self, board: JobBoard, pick: int) -> bool:
        if not self.closed:
            return False
        closed = self.closed[pick % len(self.closed)]
        self.call(closed.aclose)  # idempotent
        self.expect_error(BoardClosed, lambda: closed.claim_next("w1"))
        self.expect_error(BoardClosed, lambda: closed.post("a"))
        self.expect_error(BoardClosed, closed.job_count)
        return True

    def pending_outcome(self, board: JobBoard, pick: int) -> bool:
        """``wait_for_completion`` of a job on the board does not return."""
        if not self.model.board():
            return False
        job_id = self.ids[self.job_at(pick, anywhere=False)]
        assert not self.returns_soon(lambda: board.wait_for_completion(job_id)), (
            f"wait_for_completion({job_id}) returned for a job on the board")
        return True

    def watch_a_claim(self, board: JobBoard, pick: int) -> bool:
        """``watch_claim`` returns at once for a stale claim and waits while the claim is current."""
        if not self.claims:
            return False
        expected, claim = self.claims[pick % len(self.claims)]
        if self.is_current(expected):
            assert not self.returns_soon(lambda: board.watch_claim(claim)), (
                f"watch_claim returned for the current claim of {claim.job.id}")
        else:
            reason = self.call(lambda: board.watch_claim(claim))
            assert isinstance(reason, str) and reason, f"watch_claim of a stale claim returned {reason!r}"
        return True

    def wait(self, board: JobBoard, pick: int) -> bool:
        """``wait`` returns claimable jobs in board order (maybe only the first), or waits for one."""
        names = NAME_FILTERS[pick % len(NAME_FILTERS)]
        claimable = [self.ids[job.index] for job in self.model.candidates(names)]
        if not claimable:
            assert not self.returns_soon(lambda: board.wait(names=names)), f"wait(names={names}) found work"
            return True
        found = [job.id for job in self.call(lambda: board.wait(names=names))]
        expected = claimable[:len(found)] if self.claim_next_best_first else [j for j in claimable if j in found]
        assert found and found == expected, f"wait(names={names}): {found}, the model says {claimable}"
        return True

