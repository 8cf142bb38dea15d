"""postgresql:// and the fleet rule (issue 28): a claimable job wakes one idle board, not every board.

Four boards (four sessions, as four worker processes would have) wait on one board name; each post
wakes exactly one of them (the longest idle), the others stay asleep (``idle_poll`` is long here, so
only a NOTIFY could wake them), and four posts wake all four, one each.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import JobBoard, open_board
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)


async def test_each_post_wakes_one_idle_board(postgresql_url: str) -> None:  # noqa: F811
    url = f"{postgresql_url}?board=fleet-{uuid.uuid4().hex}&idle_poll=30"
    woken: list[int] = []
    async with open_board(url) as poster, open_board(url) as b0, open_board(url) as b1, \
            open_board(url) as b2, open_board(url) as b3:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for index, board in enumerate((b0, b1, b2, b3)):
                    group.start_soon(wait_then_claim, index, board, woken)
                    await anyio.sleep(0.1)  # each marks its session idle before the next: b0 is the longest idle
                await poster.post("a")
                await anyio.sleep(0.5)
                assert woken == [0], f"one post woke {woken}"
                for _ in range(3):
                    await poster.post("a")  # the group ends once each waiter was woken and claimed
        assert sorted(woken) == [0, 1, 2, 3]
        assert await poster.job_count() == 0


async def wait_then_claim(index: int, board: JobBoard, woken: list[int]) -> None:
    await board.wait()
    woken.append(index)
    claim = await board.claim_next(f"w{index}")
    assert claim is not None, "woken for a job another board took"
    await board.consume(claim)
