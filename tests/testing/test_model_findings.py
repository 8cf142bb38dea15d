"""What the model-based test (tests/testing/test_model_based.py) found, each as a small deterministic test.

Each runs on every in-tree backend. memory:// and redis:// got them right; zookeeper:// failed each until
fixed: trashing the root of a diamond of linked jobs put the shared dependent's trash
operations twice in one multi (nothing could be trashed); claim_next, once it had passed
over a job in a call (name not wanted, delayed, exhausted), picked at random among the next
64 candidates instead of the best.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import open_board
from jobboard.board.contract import JobBoard
from jobboard.job import JobState, Priority
from tests.support.boards import BACKENDS, fresh_board_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS)
async def board(request: pytest.FixtureRequest) -> AsyncIterator[JobBoard]:
    async with open_board(fresh_board_url(request, "findings")) as opened:
        yield opened


@pytest.mark.parametrize("how", ["cancel", "trash", "exhausted"])
async def test_trashing_the_root_of_a_diamond(board: JobBoard, how: str) -> None:
    """root <- middle <- bottom, and bottom also depends on root: trashing root trashes all three."""
    with anyio.fail_after(30):
        root = await board.post("root", max_attempts=1)
        middle = await board.post("middle", depends_on=[root])
        bottom = await board.post("bottom", depends_on=[root, middle])
        if how == "cancel":
            await board.cancel(root, "not needed")
        elif how == "trash":
            await board.trash(await board.claim(root, "w1"), "bad input")
        else:
            await board.abandon(await board.claim(root, "w1"))
            assert await board.claim_next("w1") is None  # meets root with its attempts used: trashes it
        states = [await board.state(job) for job in (root, middle, bottom)]
        assert states == [JobState.TRASHED] * 3
        assert await board.job_count() == 0


async def passed_over_first(board: JobBoard, case: str) -> None:
    """Put one job that claim_next must pass over ahead of 40 claimable ones."""
    if case == "name not wanted":
        await board.post("other", priority=Priority.HIGH)
        return
    head = await board.post("a", priority=Priority.HIGH, max_attempts=1 if case == "exhausted" else None)
    await board.abandon(await board.claim(head, "w1"), retry_after=3600 if case == "delayed" else None)


@pytest.mark.parametrize("case", ["name not wanted", "delayed", "exhausted"])
async def test_claim_next_hands_out_the_best_job_after_passing_one_over(board: JobBoard, case: str) -> None:
    with anyio.fail_after(30):
        await passed_over_first(board, case)
        best = [(await board.post("a", {"i": index})).id for index in range(40)]
        random.seed(9)  # the ZooKeeper picker's random choice: same every run
        claim = await board.claim_next("w1", names=["a"])
        assert claim is not None and claim.job.id == best[0]
