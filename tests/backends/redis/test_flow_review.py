"""redis:// flow control, an independent review (issue 27): the parked held-back jobs (flow.lua's hg:<group>)
against every way a job refilled for a free permit can leave the board unclaimed. Each bug found is a test
marked ``xfail(strict=True)`` naming it; the others check a guarantee that holds (an intermediate version of
flow.lua's left(), refilling only after a claimed job or a sequence's, failed the first two)."""

from __future__ import annotations

import random
import uuid

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import HeldBack, JobNotFound, NotClaimable
from jobboard.job import Claim, JobState
from jobboard_redis import RedisBackend
from tests.support.flow_review import (
    exhausted_at_claim_takes_no_grant,
    held_back_exhausted_job,
    sequence_in_posting_order,
)

pytestmark = pytest.mark.timeout(60)


def board_url(base: str) -> str:
    return f"{base}/0/review-{uuid.uuid4().hex}?session_timeout=10"


async def claimed_within(board: JobBoard, seconds: float) -> Claim | None:
    """``claim_next`` retried (with ``wait()`` between) until a claim or ``seconds`` pass."""
    with anyio.move_on_after(seconds):
        while True:
            claim = await board.claim_next("w")
            if claim is not None:
                return claim
            with anyio.move_on_after(0.1):
                await board.wait()
    return None


async def test_a_refilled_job_cancelled_before_its_claim_strands_no_parked_job(redis_url: str) -> None:
    """refill() moves back as many parked jobs as permits are free: one that leaves unclaimed (a cancel) must
    refill again (left()), or the group's other parked jobs stay in hg:<group> for good."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("g", concurrency=1)
            jobs = [await board.post("w", group="g") for _ in range(3)]
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == jobs[0].id
            assert await board.claim_next("w") is None  # the two others parked (the group is at its limit)
            await board.consume(claim)  # the permit returns: one parked job refilled (jobs[1])
            await board.cancel(jobs[1], "not wanted")  # it leaves before anyone claims it
            [limit] = await board.limits()
            assert (limit.running, limit.waiting) == (0, 1)  # no permit in use, one job waiting: it must run
            last = await claimed_within(board, 2.0)
            assert last is not None and last.job.id == jobs[2].id


async def test_a_rate_refilled_job_cancelled_before_its_claim_strands_no_parked_job(redis_url: str) -> None:
    """The same for a rate: its refill drops the group's 'rdue' entry; the rest must not be left parked."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("g", rate=(1, 0.3))
            jobs = [await board.post("w", group="g") for _ in range(3)]
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == jobs[0].id
            await board.consume(claim)
            assert await board.claim_next("w") is None  # the rate is used: the two others parked
            await anyio.sleep(0.4)
            offered = await board.wait()  # the next permit is due: one parked job refilled and offered
            assert [job.id for job in offered] == [jobs[1].id]
            await board.cancel(jobs[1], "not wanted")
            last = await claimed_within(board, 2.0)  # the rate allows one claim per 0.3 s: due long since
            assert last is not None and last.job.id == jobs[2].id


async def test_a_refilled_job_claimed_by_another_group_first_is_parked_again_not_lost(redis_url: str) -> None:
    """A refilled job that meets its group full again (the permit taken by a job never parked) is parked
    again, and comes back when that claim ends."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("g", concurrency=1)
            first, parked = await board.post("w", group="g"), await board.post("w", group="g")
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == first.id
            assert await board.claim_next("w") is None
            late = await board.post("w", group="g", priority="high")
            await board.consume(claim)  # refills `parked`, but `late` is ahead of it
            taken = await board.claim_next("w")
            assert taken is not None and taken.job.id == late.id
            assert await board.claim_next("w") is None  # parked again behind the limit
            await board.consume(taken)
            again = await claimed_within(board, 2.0)
            assert again is not None and again.job.id == parked.id


async def test_a_malformed_parked_job_does_not_break_the_consume_of_its_groups_holder(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            client, prefix = board.backend.client, board.backend.options.prefix
            await board.set_limit("g", concurrency=1)
            holder, broken, last = [await board.post("w", group="g") for _ in range(3)]
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == holder.id
            assert await board.claim_next("w") is None  # `broken` and `last` parked
            await client.command("DEL", f"{prefix}job:{broken.id}")
            await client.command("SET", f"{prefix}job:{broken.id}", "not a job hash")  # a malformed entry
            await board.consume(claim)  # fails: WRONGTYPE from the refill, after the permit was removed
            assert await board.state(holder) is JobState.COMPLETE
            nxt = await claimed_within(board, 2.0)  # the malformed one set aside, the last one claimable
            assert nxt is not None and nxt.job.id == last.id


@pytest.mark.parametrize("case", ["paused", "sequence", "concurrency"])
async def test_claim_next_trashes_no_held_back_job_whose_attempts_are_used_up(redis_url: str, case: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            job = await held_back_exhausted_job(board, case)
            assert await board.claim_next("o2") is None
            assert await board.state(job) is JobState.UNCLAIMED


async def test_a_sequence_runs_in_posting_order_past_priorities_delays_and_abandons(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await sequence_in_posting_order(board)


async def test_a_claim_resent_after_a_lost_reply_counts_once_in_its_rate_window(redis_url: str) -> None:
    """The resend (its nonce marked '!') finds the first attempt's claim: no second grant is logged."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            client, prefix, session = board.backend.client, board.backend.options.prefix, board.backend.session.id
            await board.set_limit("g", rate=(2, 60.0))
            await board.post_many([NewJob("w", group="g") for _ in range(3)])
            first = await client.call("claim_next", "lost-reply:60000", "o", session, "1000")
            again = await client.call("claim_next", "!lost-reply:60000", "o", session, "1000")
            assert first[0] == again[0] == "ok" and first[1][0] == again[1][0]
            assert int(await client.command("ZCARD", f"{prefix}rl:g")) == 1
            assert await board.claim_next("o") is not None  # the rate's second grant
            assert await board.claim_next("o") is None


async def test_a_job_trashed_at_claim_for_its_attempts_takes_no_permit_nor_rate_grant(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await exhausted_at_claim_takes_no_grant(board)


async def test_a_malformed_head_of_a_sequence_set_aside_lets_the_sequence_go_on(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            client, prefix = board.backend.client, board.backend.options.prefix
            await board.set_limit("s", sequence=True)
            broken, nxt = await board.post("w", group="s"), await board.post("w", group="s")
            await client.command("DEL", f"{prefix}job:{broken.id}")
            await client.command("SET", f"{prefix}job:{broken.id}", "not a job hash")  # a malformed entry
            claim = await claimed_within(board, 2.0)  # the malformed head set aside, the next job runs
            assert claim is not None and claim.job.id == nxt.id


async def test_claimers_on_several_boards_never_hold_more_than_the_groups_last_permits(redis_url: str) -> None:
    """16 claimers on 4 boards (claim_next, the fused consume_and_claim_next, claim(job)) over 80 jobs of a group
    limited to 2 and 40 plain ones: at most 2 of the group held at any time, every job consumed once."""
    rng = random.Random(11)
    url = board_url(redis_url)
    with anyio.fail_after(50):
        async with open_board(url) as first:
            await first.set_limit("g", concurrency=2)
            jobs = await first.post_many([NewJob("w", group="g") for _ in range(80)] + [NewJob("w") for _ in range(40)])
            grouped = [job.id for job in jobs if job.group == "g"]
            boards = [first] + [await open_board(url).__aenter__() for _ in range(3)]
            held, most, consumed = [0], [0], list[str]()
            try:
                async def claimer(index: int) -> None:
                    board = boards[index % len(boards)]
                    while len(consumed) < len(jobs):
                        claim: Claim | None
                        if rng.random() < 0.3:
                            try:
                                claim = await board.claim(rng.choice(grouped), f"c{index}")
                            except (NotClaimable, JobNotFound):  # held back, claimed or consumed already
                                claim = None
                        else:
                            claim = await board.claim_next(f"c{index}")
                        while claim is not None:
                            counted = claim.job.group == "g"
                            held[0] += counted
                            most[0] = max(most[0], held[0])
                            await anyio.sleep(rng.uniform(0, 0.003))
                            held[0] -= counted
                            consumed.append(claim.job.id)
                            if rng.random() < 0.5:
                                claim = await board.consume_and_claim_next(claim)
                            else:
                                await board.consume(claim)
                                claim = None
                        with anyio.move_on_after(0.05):
                            await board.wait()

                async with anyio.create_task_group() as tasks:
                    for index in range(16):
                        tasks.start_soon(claimer, index)
            finally:
                for board in boards[1:]:
                    await board.aclose()
            assert most[0] == 2
            assert sorted(consumed) == sorted(job.id for job in jobs)


async def test_a_rate_period_raised_at_run_time_keeps_the_grants_in_its_window(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("g", rate=(2, 0.5))
            jobs = [await board.post("w", group="g") for _ in range(3)]
            for job in jobs[:2]:
                await board.claim(job, "o")
            await board.set_limit("g", rate=(2, 30.0))  # the two grants now count for 30 s
            await anyio.sleep(1.8)  # past the log's expiry (0.5 s + 1 s)
            with pytest.raises(HeldBack) as held:
                await board.claim(jobs[2], "o")
            assert held.value.why == "rate"
