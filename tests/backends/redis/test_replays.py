"""redis://: a write whose reply is lost is resent (marked as a resend) and resolved exactly, for the
paths the fault suite does not cover: claim_next, the fused consume-and-claim, a post_many chunk posted
at once, and a claim resent after its job was settled."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard_redis import RedisBackend
from tests.backends.redis.test_faults import lose_replies

pytestmark = pytest.mark.timeout(60)


def url(base: str) -> str:
    return f"{base}/0/replays-{uuid.uuid4().hex}?session_timeout=5"


async def test_a_claim_next_whose_reply_is_lost_returns_that_claim(redis_url: str) -> None:
    with anyio.fail_after(20):
        async with open_board(url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            first, second = await board.post("a"), await board.post("b")
            lost = lose_replies(board, 1)
            claim = await board.claim_next("me")
            assert lost == [1] and claim is not None and claim.job.id == first.id and claim.attempt == 1
            assert await board.owner(second) is None  # the resend claimed nothing more
            nxt = await board.consume_and_claim_next(claim, "r")
            assert nxt is not None and nxt.job.id == second.id
            await board.consume(nxt)
            assert await board.job_count() == 0


async def test_a_fused_consume_and_claim_whose_reply_is_lost_is_applied_once(redis_url: str) -> None:
    with anyio.fail_after(20):
        async with open_board(url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            jobs = [await board.post("j", {"i": i}) for i in range(3)]
            claim = await board.claim_next("me")
            assert claim is not None
            lost = lose_replies(board, 1)
            nxt = await board.consume_and_claim_next(claim, "done")
            assert lost == [1] and nxt is not None and nxt.job.id == jobs[1].id and nxt.attempt == 1
            assert await board.owner(jobs[2]) is None
            assert await board.job_count() == 2


async def test_a_post_many_chunk_posted_at_once_is_not_duplicated(redis_url: str) -> None:
    with anyio.fail_after(20):
        async with open_board(url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            lost = lose_replies(board, 1)
            jobs = await board.post_many([NewJob("x", {"i": i}) for i in range(50)] +
                                         [NewJob("jobboard.internal", {"i": 0})])
            assert lost == [1] and [job.details.get("i") for job in jobs[:50]] == list(range(50))
            assert len({job.id for job in jobs}) == 51 and await board.job_count() == 51
            ready = [await board.claim_next("me") for _ in range(51)]
            assert [c.job.id for c in ready if c is not None] == [job.id for job in jobs[:50]]  # internal: by name
            internal = await board.claim_next("me", names=["jobboard.internal"])
            assert internal is not None and internal.job.id == jobs[50].id


async def test_jobs_written_by_the_previous_layout_are_claimed_and_settled(redis_url: str) -> None:
    """Jobs of the previous version: every field written (empty ones too), no 'nd' (dependency count)."""
    with anyio.fail_after(20):
        async with open_board(url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            prefix = board.backend.options.prefix
            parent = await board.post("parent")
            child = await board.post("child", depends_on=[parent])
            for job in (parent, child):
                await board.backend.client.command("HDEL", f"{prefix}job:{job.id}", "nd")
                await board.backend.client.command("HSET", f"{prefix}job:{job.id}", "owner", "", "sess", "", "nb", "",
                                           "key", "", "maxa", "", "keep", "0", "rttl", "", "tttl", "")
            claim = await board.claim_next("me")
            assert claim is not None and claim.job.id == parent.id
            await board.consume(claim, {"r": 1})
            second = await board.claim_next("me")
            assert second is not None and second.job.id == child.id and second.dependency_results == ({"r": 1},)
            await board.consume(second)
            assert await board.job_count() == 0
            assert await board.backend.client.command("EXISTS", f"{prefix}res:{child.id}") == 0
