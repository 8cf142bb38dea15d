"""Idempotency keys across the partitions of a spread redis:// board (jobboard_redis.spread.keys): a key's record
in its partition is the one arbiter, a keyed job posted in its group's partition is held until the record names
it. The failure modes: a poster dying between the calls (the sweep's outcome), concurrent posts of one key,
lost replies; and the cost (calls per post)."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import jobboard_redis.spread.links as links_module
from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, NotClaimable
from jobboard.job import Job, JobState
from jobboard_redis.board import RedisBackend
from jobboard_redis.cluster import crc16
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread.flow import group_index
from jobboard_redis.spread.layout import partition_of
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401

pytestmark = pytest.mark.timeout(60)
K = 3


def url_of(seeds: str, extra: str = "") -> str:
    return f"redis://{seeds}/0/keys-{uuid.uuid4().hex}?cluster=1&partitions={K}&session_timeout=4{extra}"


def spread(board: JobBoard) -> SpreadBackend:
    assert isinstance(board.backend, SpreadBackend)
    return board.backend


def key_in(index: int, tag: str = "") -> str:
    """A fresh key whose record is in partition ``index``."""
    base = uuid.uuid4().hex[:8]
    return next(f"{tag}{base}-{n}" for n in range(1000) if crc16(f"{tag}{base}-{n}".encode()) % K == index)


def group_in(index: int) -> str:
    return next(f"g{n}" for n in range(1000) if group_index(f"g{n}", K) == index)


async def claimable(board: JobBoard) -> list[str]:
    """The ids claim_next hands out until none is left (claimed and consumed)."""
    taken = []
    while (claim := await board.claim_next("w")) is not None:
        taken.append(claim.job.id)
        await board.consume(claim)
    return taken


async def post_dying_after_the_held_post(board: JobBoard, key: str, group: str) -> None:
    """Post ``key`` with ``group`` (another partition than the key's) as a poster that dies after step 1: its
    held job is written, the key's record never named (``Keys.arbitrate`` fails)."""
    async def dies(*args: object, **kwargs: object) -> None:
        raise BackendUnavailable("the poster died")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spread(board).keys, "arbitrate", dies)
        with pytest.raises(BackendUnavailable):
            await board.post("charge", key=key, group=group)


def counting(backend: SpreadBackend) -> list[str]:
    """Every partition call of ``backend`` from now on, by operation name."""
    calls: list[str] = []
    for part in backend.parts:
        def wrap(call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def counted(op: str, *args: Any, **kwargs: Any) -> Any:
                calls.append(op)
                return await call(op, *args, **kwargs)
            return counted
        part._call = wrap(part._call)  # type: ignore[method-assign,assignment]
    return calls


async def test_one_key_one_job_with_or_without_a_group_in_either_order(cluster_seeds: str) -> None:  # noqa: F811
    """The review's case both ways round, and with post_many: a grouped post elsewhere finds the plain one's job."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            key = key_in(0)
            plain = await board.post("charge", key=key)
            grouped = await other.post("charge", key=key, group=group_in(1))
            batch = await other.post_many([NewJob("charge", key=key, group=group_in(2)), NewJob("charge", key=key),
                                           NewJob("other", key=key_in(1))])
            assert [grouped.id, batch[0].id, batch[1].id] == [plain.id] * 3
            assert int(batch[2].id) % K == 1 and await board.backend.job_count() == 2
            assert sorted(await claimable(board)) == sorted([plain.id, batch[2].id])


async def test_a_poster_dying_after_the_held_post_is_finished_by_the_sweep(cluster_seeds: str) -> None:  # noqa: F811
    """Crash after step 1: the job is listed, waiting, never claimable; a sweep names it in the key's record and
    releases it. A post of the key meanwhile (no group, so in the key's partition) answers it once named."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            backend, key = spread(board), key_in(0)

            await post_dying_after_the_held_post(board, key, group_in(2))
            [held] = [job async for job in board.iterjobs()]
            assert int(held.id) % K == 2 and (await board.state(held.id)) is JobState.WAITING
            assert await other.claim_next("w") is None
            with pytest.raises(NotClaimable):
                await other.claim(held.id, "w")
            assert await spread(other).keys.finish(backend.parts[2], 0) == 1
            assert (await other.post("charge", key=key)).id == held.id
            assert await claimable(other) == [held.id]
            assert await spread(other).keys.finish(backend.parts[2], 0) == 0


POSTER = """
import asyncio, os, signal, sys
from jobboard import open_board
from jobboard_redis.spread.keys import Keys

async def main(url, key, group):
    async def killed(*args, **kwargs):  # the process dies between the held post and the key's record
        os.kill(os.getpid(), signal.SIGKILL)
    Keys.arbitrate = killed
    async with open_board(url) as board:
        await board.post("charge", key=key, group=group)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_poster_killed_between_the_calls_leaves_a_job_the_sweep_finishes(cluster_seeds: str) -> None:  # noqa: F811
    """A real crash (SIGKILL, the board not closed) after the held post: the job is listed, held; the sweep of
    another board names and releases it, and a post of the key from any partition answers it."""
    with anyio.fail_after(40):
        async with open_board(url_of(cluster_seeds)) as board:
            key = key_in(0)
            child = await asyncio.create_subprocess_exec(sys.executable, "-c", POSTER, board.url, key, group_in(2))
            assert await asyncio.wait_for(child.wait(), 30) == -signal.SIGKILL
            [held] = [job async for job in board.iterjobs()]
            assert (await board.state(held.id)) is JobState.WAITING and await board.claim_next("w") is None
            backend = spread(board)
            assert await backend.keys.finish(backend.parts[2], 0) == 1
            found = [await board.post("charge", key=key), await board.post("charge", key=key, group=group_in(1))]
            assert {job.id for job in found} == {held.id}
            assert await claimable(board) == [held.id]


async def test_a_held_job_whose_key_went_to_another_post_meanwhile_is_dropped(cluster_seeds: str) -> None:  # noqa: F811
    """Crash after step 1, then another post of the key wins the record (its partition had none): the sweep
    drops the held job (never claimable, gone from listings); one job, the winner's."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            backend, key = spread(board), key_in(0)

            await post_dying_after_the_held_post(board, key, group_in(1))
            winner = await other.post("charge", key=key)
            assert int(winner.id) % K == 0
            assert await backend.keys.finish(backend.parts[1], 0) == 1
            assert [job.id async for job in board.iterjobs()] == [winner.id]
            assert (await board.post("charge", key=key, group=group_in(1))).id == winner.id
            assert await claimable(other) == [winner.id]


async def test_a_poster_dying_after_naming_its_job_leaves_it_found_then_released(cluster_seeds: str) -> None:  # noqa: F811
    """Crash after step 2 (the record names the held job, not released): every post of the key answers that job
    (held: not claimable yet); the sweep releases it."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            backend, key = spread(board), key_in(0)
            release = RedisBackend._call

            async def dies_before_release(self: RedisBackend, op: str, *args: Any, **kwargs: Any) -> Any:
                if op == "release":
                    raise BackendUnavailable("the poster died")
                return await release(self, op, *args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "_call", dies_before_release)
                with pytest.raises(BackendUnavailable):
                    await board.post("charge", key=key, group=group_in(2))
            [held] = [job async for job in board.iterjobs()]
            found = [await other.post("charge", key=key), await other.post("charge", key=key, group=group_in(1))]
            assert {job.id for job in found} == {held.id}
            assert [job.id async for job in board.iterjobs()] == [held.id]  # the second's held job dropped
            assert await other.claim_next("w") is None  # named, not released yet
            again = await board.post("charge", key=key, group=group_in(2))  # the same post again finishes it
            assert again.id == held.id
            assert await backend.keys.finish(backend.parts[2], 0) == 0
            assert await claimable(other) == [held.id]


async def test_a_held_job_cancelled_before_it_was_named_is_the_keys_trashed_job(cluster_seeds: str) -> None:  # noqa: F811
    """Crash after step 1, the held job cancelled meanwhile (listed: anyone may): the sweep names it in the key's
    record from its trash entry, so a post of the key answers it, trashed, as on one slot; nothing is claimable."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            backend, key = spread(board), key_in(0)

            await post_dying_after_the_held_post(board, key, group_in(1))
            [held] = [job async for job in board.iterjobs()]
            await other.cancel(held, "not wanted")
            assert await backend.keys.finish(backend.parts[1], 0) == 1
            assert (await other.post("charge", key=key)).id == held.id
            assert [item.job.id async for item in board.trashed()] == [held.id]
            assert await board.claim_next("w") is None and await board.backend.job_count() == 0


async def test_concurrent_posts_of_one_key_make_one_job(cluster_seeds: str) -> None:  # noqa: F811
    """Posts of one key at once from four boards, with groups of every partition and none, three rounds: every
    post answers the same job, which is the board's only job of the key and claimable once."""
    with anyio.fail_after(40):
        url = url_of(cluster_seeds)
        async with open_board(url) as a, open_board(url) as b, open_board(url) as c, open_board(url) as d:
            boards = [a, b, c, d]
            groups = [group_in(index) for index in range(K)] + [None]
            for round_ in range(3):
                key = key_in(round_ % K)
                answers: list[Job] = []

                async def post(board: JobBoard, group: str | None, key: str, answers: list[Job]) -> None:
                    answers.append(await board.post("charge", key=key, group=group))

                async with anyio.create_task_group() as tasks:
                    for n in range(12):
                        tasks.start_soon(post, boards[n % 4], groups[(n + round_) % 4], key, answers)
                assert len({job.id for job in answers}) == 1, [job.id for job in answers]
            assert len([job async for job in a.iterjobs()]) == 3
            assert len(await claimable(a)) == 3


async def test_lost_replies_are_answered_by_resends_and_reposts(cluster_seeds: str) -> None:  # noqa: F811
    """Each of the three calls applied, its reply lost and the call resent (as the client does, the nonce
    marked): one job, held once (claimable after). A reply lost for good after the key's record named the job:
    the post raises, posting again answers that job, and a post from the key's partition finds it."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board, open_board(board.url) as other:
            call = RedisBackend._call

            async def resent(self: RedisBackend, op: str, nonce: str, *args: Any, **kwargs: Any) -> Any:
                if op in ("post_held", "key_take", "release"):
                    await call(self, op, nonce, *args, **kwargs)
                    nonce = f"!{nonce}" if nonce else nonce
                return await call(self, op, nonce, *args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "_call", resent)
                job = await board.post("charge", key=key_in(0), group=group_in(1))
            assert [found.id async for found in board.iterjobs()] == [job.id]
            assert await claimable(other) == [job.id]

            async def reply_lost(self: RedisBackend, op: str, *args: Any, **kwargs: Any) -> Any:
                result = await call(self, op, *args, **kwargs)
                if op == "key_take":
                    raise BackendUnavailable("the reply was lost")
                return result

            key = key_in(0, "b")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "_call", reply_lost)
                with pytest.raises(BackendUnavailable):
                    await other.post("charge", key=key, group=group_in(2))
            again = await other.post("charge", key=key, group=group_in(2))
            assert (await board.post("charge", key=key)).id == again.id
            assert await claimable(board) == [again.id]


async def test_a_record_naming_a_job_gone_is_removed_and_the_key_posts_again(cluster_seeds: str) -> None:  # noqa: F811
    """key_retention=0: once the job elsewhere is consumed, nothing of it is left; a post of the key (from its
    partition) makes a new job; a record left naming it (the settle's outbox entry lost: restored here) is found
    stale and removed by the sweep's check."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=0")) as board:
            backend, key, later = spread(board), key_in(0), key_in(0, "l")
            first = await board.post("charge", key=key, group=group_in(1))
            await board.consume(await board.claim(first, "w"))
            fresh = await board.post("charge", key=key)
            assert fresh.id != first.id and int(fresh.id) % K == 0
            gone = await board.post("charge", key=later, group=group_in(2))
            await board.consume(await board.claim(gone, "w"))
            part = backend.parts[0]
            prefix = part.options.prefix
            await backend.links.forward(backend.parts[2])  # the settle's entry, as the next sweep forwards it
            assert await part.client.command("EXISTS", prefix + "k:" + later) == 0
            await part.client.command("SET", prefix + "k:" + later, gone.id)  # as if its entry were lost
            await part.client.command("ZADD", prefix + "kf", 0, later)  # due now
            assert await backend.keys.check(part) >= 1
            assert await part.client.command("EXISTS", prefix + "k:" + later) == 0


async def test_posts_pay_an_extra_call_only_when_keyed_for_another_partition(cluster_seeds: str) -> None:  # noqa: F811
    """Calls per post: plain 1, keyed 1, keyed with a group of the key's partition 1, keyed with a group of
    another partition 3 (held post, the key's record, release), and the same post again 2."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board:
            calls = counting(spread(board))
            far = key_in(1)
            posts: list[Callable[[], Awaitable[Job]]] = [
                lambda: board.post("x"), lambda: board.post("x", key=key_in(0)),
                lambda: board.post("x", key=key_in(1), group=group_in(1)),
                lambda: board.post("x", key=far, group=group_in(2)), lambda: board.post("x", key=far, group=group_in(2))]
            seen = []
            for post in posts:
                calls.clear()
                await post()
                seen.append(list(calls))
            assert seen == [["post"], ["post"], ["post"], ["post_held", "key_take", "release"],
                            ["post_held", "key_take"]]  # the same again: found released, the record checked


def test_the_partition_of_a_name_is_its_cluster_hash_mod_k() -> None:
    """The table-driven CRC-16 that routes keys and groups agrees with Redis Cluster's (cluster.crc16)."""
    names = ["", "a", "order-7", "tenant-42", "ключ", "\u3042" * 9, *(uuid.uuid4().hex for _ in range(200))]
    for name in names:
        for count in (2, 3, 7, 64, 1 << 16):
            assert partition_of(name, count) == crc16(name.encode()) % count, name


async def test_every_boards_sweep_removes_a_record_whose_job_is_gone(cluster_seeds: str) -> None:  # noqa: F811
    """The links' sweep runs the keys' (its period shortened): a record due for its check, naming a job consumed
    with no key retention (its settle's entry lost: the record restored here), is removed by the board's own
    sweep."""
    with anyio.fail_after(30), pytest.MonkeyPatch.context() as patch:
        patch.setattr(links_module, "SWEEP", 0.05)
        async with open_board(url_of(cluster_seeds, "&key_retention=0")) as board:
            backend, key = spread(board), key_in(0)
            job = await board.post("charge", key=key, group=group_in(1))
            await board.consume(await board.claim(job, "w"))
            part = backend.parts[0]
            record = part.options.prefix + "k:" + key
            await part.client.command("SET", record, job.id)  # as if the settle's entry were lost
            await part.client.command("ZADD", part.options.prefix + "kf", 0, key)  # due now
            for _ in range(200):
                if not await part.client.command("EXISTS", record):
                    break
                await anyio.sleep(0.05)
            assert not await part.client.command("EXISTS", record), "the sweep left a record naming a job gone"
