"""redis://: flow control's server side (flow.lua): a permit is a member of the group's set of claimed jobs
(gr:<group>), kept by every script that starts or ends a claim; held-back jobs are parked, not scanned again;
a board with no limit and no pause writes no flow-control key."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from jobboard import NewJob, Priority, open_board
from jobboard.backend import Backend
from jobboard.board.contract import JobBoard
from jobboard_redis import RedisBackend
from jobboard_redis.spread import SpreadBackend

pytestmark = pytest.mark.timeout(60)


def board_url(base: str, session_timeout: float = 10.0) -> str:
    return f"{base}/0/flow-{uuid.uuid4().hex}?session_timeout={session_timeout}"


async def command(board: JobBoard, *args: Any) -> Any:
    """A raw command on the board's server (keys named without the board's prefix: ``key`` below)."""
    assert isinstance(board.backend, RedisBackend)
    return await board.backend.client.command(*args)


def key(board: JobBoard, name: str) -> str:
    assert isinstance(board.backend, RedisBackend)
    return board.backend.options.prefix + name


async def permits(board: JobBoard, group: str) -> int:
    return int(await command(board, "SCARD", key(board, f"gr:{group}")))


async def test_every_end_of_a_claim_gives_its_permit_back_on_the_server(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url, session_timeout=1.0)) as board:
            await board.set_limit("g", concurrency=1)
            for _ in range(8):
                await board.post("w", group="g")
            for end in ("consume", "abandon", "trash", "cancel", "fused"):
                claim = await board.claim_next("w")
                assert claim is not None and await permits(board, "g") == 1
                if end == "consume":
                    await board.consume(claim)
                elif end == "abandon":
                    await board.abandon(claim)
                elif end == "trash":
                    await board.trash(claim, "bad")
                elif end == "cancel":
                    await board.cancel(claim.job, "unwanted")
                else:
                    after = await board.consume_and_claim_next(claim)  # the permit given and taken in one call
                    assert after is not None and await permits(board, "g") == 1
                    await board.consume(after)
                assert await permits(board, "g") == 0, end
            async with open_board(board.url) as holder:  # a holder whose session expires (as after a crash)
                assert isinstance(holder.backend, RedisBackend)
                assert await holder.claim_next("dies") is not None and await permits(board, "g") == 1
                await command(board, "ZADD", key(board, "sessions"), "XX", "0", holder.backend.session.id)
                for _ in range(100):  # reaped by a heartbeat (any board's) within 5 s: the permit with the claim
                    if not await permits(board, "g"):
                        break
                    await anyio.sleep(0.05)
                assert await permits(board, "g") == 0
            assert await board.claim_next("w") is not None


async def test_a_claim_given_up_before_its_reply_gives_its_permit_back(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            await board.set_limit("g", concurrency=1)
            await board.post("w", group="g")
            waiting = await board.post("w", group="g")
            session, nonce = board.backend.session.id, "given-up:60000"
            status, _, _ = await board.backend.client.call("claim_next", nonce, "w", session, "1000")
            assert status == "ok" and await permits(board, "g") == 1
            status, _, _ = await board.backend.client.call("unclaim", nonce, session)
            assert status == "ok" and await permits(board, "g") == 0
            claim = await board.claim_next("w")  # the first job again, not the one the limit held
            assert claim is not None and claim.job.id != waiting.id


async def test_a_group_at_its_limit_is_parked_once_not_scanned_by_every_claim(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("busy", concurrency=1)
            for _ in range(5):
                await board.post_many([NewJob("w", group="busy", priority=Priority.HIGH) for _ in range(500)])
            plain = [await board.post("w", priority=Priority.LOW) for _ in range(2)]
            held = await board.claim_next("w")
            assert held is not None and held.job.group == "busy"
            offered = await board.wait()  # its peek parks what the limit holds back, and offers the rest
            assert offered and offered[0].id == plain[0].id
            assert int(await command(board, "ZCARD", key(board, "hg:busy"))) == 2499
            assert int(await command(board, "ZCARD", key(board, "ready"))) == 2  # no claim looks at them again
            taken = [await board.claim_next("w") for _ in range(2)]
            assert [claim.job.id for claim in taken if claim is not None] == [job.id for job in plain]
            assert await board.claim_next("w") is None
            await board.consume(held)  # one permit back: one parked job back in the claim indexes
            assert int(await command(board, "ZCARD", key(board, "ready"))) == 1
            assert (running := await board.claim_next("w")) is not None and running.job.group == "busy"


async def test_claim_next_goes_past_more_held_back_jobs_than_one_call_parks(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("busy", concurrency=0)
            for _ in range(5):
                await board.post_many([NewJob("w", group="busy", priority=Priority.HIGH) for _ in range(500)])
            plain = await board.post("w", priority=Priority.LOW)
            claim = await board.claim_next("w")  # 2500 parked over three calls (1000 a call, 'again' between)
            assert claim is not None and claim.job.id == plain.id
            assert int(await command(board, "ZCARD", key(board, "hg:busy"))) == 2500


async def test_clearing_a_limit_or_resuming_a_name_frees_every_parked_job(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("g", concurrency=0)
            await board.pause("paused")
            await board.post_many([NewJob("w", group="g") for _ in range(250)]
                                  + [NewJob("paused") for _ in range(250)])
            assert await board.claim_next("w") is None and await board.claim_next("x") is None
            assert int(await command(board, "ZCARD", key(board, "ready"))) == 0
            await board.clear_limit("g")
            await board.resume("paused")
            assert int(await command(board, "ZCARD", key(board, "ready"))) == 500
            assert len(await board.wait()) == 100  # the peek's limit: every one claimable


async def test_a_board_without_limits_or_pauses_writes_no_flow_control_key(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            jobs = await board.post_many([NewJob("w", group="g") for _ in range(3)] + [NewJob("w")])
            jobs.append(await board.post("w", group="h"))
            for _ in jobs:
                claim = await board.claim_next("w")
                assert claim is not None
                await board.consume(claim)
            left = {name.decode().removeprefix(key(board, ""))
                    for name in await command(board, "KEYS", key(board, "*"))}
            assert not {name for name in left if name.split(":")[0] in
                        {"lim", "pz", "gr", "gm", "hg", "hn", "rl", "rdue"}}, left


async def test_a_requeued_job_of_a_sequence_is_back_at_its_place(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            await board.set_limit("s", sequence=True)
            first, second = await board.post("w", group="s"), await board.post("w", group="s")
            claim = await board.claim_next("w")
            assert claim is not None and claim.job.id == first.id
            await board.trash(claim, "bad")
            await board.requeue(first.id)  # the head again, ahead of the later job
            again = await board.claim_next("w")
            assert again is not None and again.job.id == first.id
            await board.consume(again)
            last = await board.claim_next("w")
            assert last is not None and last.job.id == second.id


async def test_resuming_the_board_wakes_every_board_waiting(redis_url: str) -> None:
    """Boards waiting while the board is paused, whatever names they wait for, are told at the resume."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            client = board.backend.client
            await board.post("w")
            await board.pause()
            sessions = [f"waiter-{index}" for index in range(2)]
            for index, session in enumerate(sessions):  # two boards' registrations: any name, and name 'w'
                await client.call("open", "", session, 60000)
                names = ("1", "0") if index == 0 else ("0", "1", "w")
                status, data, _ = await client.call("peek", "", 100, session, "r1", "0", *names)
                assert status == "ok" and list(data[1]) == []  # nothing offered while paused: registered
            await board.resume()
            for session in sessions:
                assert await command(board, "LRANGE", key(board, f"wk:{session}"), 0, -1) == [b"w"]
            assert await command(board, "HLEN", key(board, "wait")) == 0


async def test_a_resent_clear_limit_answers_what_the_first_call_found(redis_url: str) -> None:
    """As after a lost reply: the client resends with the nonce marked (``!``), the limit is gone already."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url)) as board:
            assert isinstance(board.backend, RedisBackend)
            await board.set_limit("g", concurrency=1)
            nonce = board.backend.client.nonce()
            first = await board.backend.client.call("clear_limit", nonce, "g")
            resent = await board.backend.client.call("clear_limit", "!" + nonce, "g")
            assert first[:2] == resent[:2] == ("ok", [1])
            assert await board.clear_limit("g") is False


def test_the_spread_board_implements_flow_control() -> None:
    assert SpreadBackend.set_limit is not Backend.set_limit  # so the conformance flow cases run on it
    assert RedisBackend.set_limit is not Backend.set_limit
