"""zookeeper:// posts made in the same turn of the event loop go in one multi
(:mod:`jobboard_zookeeper.grouping`): each keeps the promise of a post made alone."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from jobboard import BackendUnavailable, JobBoard, UnknownOutcome, open_board
from jobboard_zookeeper import ZooKeeperBackend
from tests.backends.zookeeper.test_faults import board_url
from tests.backends.zookeeper.test_truth import board_behind_proxy, lose_reply_then_pause

pytestmark = pytest.mark.timeout(60)


def groups_of(board: JobBoard) -> int:
    assert isinstance(board.backend, ZooKeeperBackend)
    return board.backend._batches.grouper.groups


async def test_posts_of_one_turn_go_in_one_multi_in_the_order_called(zk_hosts: str) -> None:
    with anyio.fail_after(20):
        async with open_board(board_url(zk_hosts)) as board:
            before = groups_of(board)
            jobs = await asyncio.gather(*(board.post("j", {"i": i}) for i in range(50)))
            assert groups_of(board) - before == 1
            assert [job.details["i"] for job in jobs] == list(range(50))
            assert [job.id for job in jobs] == sorted(job.id for job in jobs)
            assert [job.id async for job in board.iterjobs()] == [job.id for job in jobs]


async def test_a_key_that_exists_in_a_group_finds_its_job_and_the_others_are_posted_once(zk_hosts: str) -> None:
    with anyio.fail_after(20):
        async with open_board(board_url(zk_hosts)) as board:
            earlier = await board.post("e", key="taken")
            jobs = await asyncio.gather(*(board.post("j", {"i": i}, key="taken" if i == 3 else
                                                     "twice" if i in (5, 7) else None) for i in range(12)))
            assert jobs[3].id == earlier.id and jobs[5].id == jobs[7].id
            listed = sorted([job.id async for job in board.iterjobs()])
            assert listed == sorted({earlier.id, *(job.id for job in jobs)})
            assert len(listed) == 1 + 12 - 2


async def test_a_post_cancelled_before_its_group_is_sent_is_not_posted(zk_hosts: str) -> None:
    with anyio.fail_after(20):
        async with open_board(board_url(zk_hosts)) as board:
            kept = asyncio.ensure_future(board.post("kept"))
            dropped = asyncio.ensure_future(board.post("dropped"))
            await asyncio.sleep(0)  # both are queued; the group is sent at the end of the next turn
            dropped.cancel()
            assert (await kept).name == "kept"
            with pytest.raises(asyncio.CancelledError):
                await dropped
            assert [job.name async for job in board.iterjobs()] == ["kept"]


async def test_a_group_that_cannot_be_resolved_says_so_to_each_post(zk_hosts: str) -> None:
    """As for a post made alone: unkeyed posts raise UnknownOutcome, keyed ones BackendUnavailable
    (posting again with the key finds the job)."""
    with anyio.fail_after(40):
        async with board_behind_proxy(zk_hosts) as (proxy, board):
            lost = lose_reply_then_pause(board, proxy)
            outcomes = await asyncio.gather(board.post("plain"), board.post("keyed", key="k-1"),
                                            return_exceptions=True)
            assert lost == [1]
            assert type(outcomes[0]) is UnknownOutcome, outcomes[0]
            assert type(outcomes[1]) is BackendUnavailable, outcomes[1]
            proxy.resume()
            for _ in range(40):  # a keyed post may be repeated: the board reconnects meanwhile
                try:
                    again = await board.post("keyed", key="k-1")
                    break
                except BackendUnavailable:
                    await anyio.sleep(0.25)
            assert sorted([job.name async for job in board.iterjobs()]) == ["keyed", "plain"]
            assert again.id in [job.id async for job in board.iterjobs()]
