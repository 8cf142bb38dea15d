"""Idempotency keys across the partitions of a spread redis:// board, the review's findings (review B: B1, B2, B3,
B5; review C: C1, C5): a lost release reply or a slow poster never runs one post twice; a trashed job's key
expires after key_retention wherever its group is (and its requeue takes the key again or loses it); a held job
cancelled meanwhile can be requeued; a settle makes its key's record elsewhere expire, as on one slot, and a
late entry of a settle before a requeue does not."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import InvalidJob
from jobboard_redis.board import RedisBackend
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401
from tests.backends.redis.test_spread_keys import claimable, counting, group_in, key_in, spread, url_of

pytestmark = pytest.mark.timeout(60)


async def test_one_post_runs_once_when_its_release_reply_is_lost(cluster_seeds: str) -> None:  # noqa: F811
    """key_retention=0: the release applies, its reply is lost, a worker claims and consumes the job before the
    resend (nothing of it left): the post answers that job, and no second one is made."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=0")) as board, \
                open_board(board.url) as worker:
            call = RedisBackend._call
            ran: list[str] = []

            async def lost_reply(self: RedisBackend, op: str, nonce: str, *args: Any, **kwargs: Any) -> Any:
                result = await call(self, op, nonce, *args, **kwargs)
                if op == "release" and not ran:
                    claim = await worker.claim_next("w")
                    assert claim is not None
                    ran.append(claim.job.id)
                    await worker.consume(claim)
                    return await call(self, op, nonce, *args, **kwargs)  # the resend
                return result

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "_call", lost_reply)
                job = await board.post("charge", key=key_in(0), group=group_in(1))
            ran += await claimable(worker)
            assert ran == [job.id], f"one post ran {len(ran)} jobs: {ran} (returned {job.id})"


async def test_a_poster_paused_past_the_sweep_gets_its_job_run_once(cluster_seeds: str) -> None:  # noqa: F811
    """The poster pauses between key_take and release; a sweep releases the job, a worker consumes it
    (key_retention=0: nothing left); the poster's release then finds it gone: its post answers that job."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=0")) as board, \
                open_board(board.url) as other:
            call = RedisBackend._call
            ran: list[str] = []
            paused_once: list[bool] = []

            async def paused(self: RedisBackend, op: str, nonce: str, *args: Any, **kwargs: Any) -> Any:
                if op == "release" and not paused_once:
                    paused_once.append(True)
                    assert await spread(other).keys.finish(self, 0) == 1  # the sweep, past the retry window
                    ran.extend(await claimable(other))
                return await call(self, op, nonce, *args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "_call", paused)
                job = await board.post("charge", key=key_in(0), group=group_in(2))
            ran += await claimable(other)
            assert ran == [job.id], f"one post ran {len(ran)} jobs: {ran} (returned {job.id})"


async def test_a_held_job_dropped_by_the_sweep_is_posted_again(cluster_seeds: str) -> None:  # noqa: F811
    """The poster pauses after its held post; the sweep drops it (the record names another job), that job is
    consumed (key_retention=0), the poster's key_take names its dropped job: release answers 'dropped' and the
    post is made again, once: one job runs, the one the post answers."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=0")) as board, \
                open_board(board.url) as other:
            backend, key = spread(board), key_in(0)
            arbitrate = backend.keys.arbitrate
            ran: list[str] = []

            async def paused(part: RedisBackend, key_: str, job_id: str, **kwargs: Any) -> Any:
                if not ran:
                    winner = await other.post("charge", key=key)
                    assert await spread(other).keys.finish(part, 0) == 1  # dropped: the record names winner
                    ran.extend(await claimable(other))
                    assert ran == [winner.id]
                return await arbitrate(part, key_, job_id, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(backend.keys, "arbitrate", paused)
                job = await board.post("charge", key=key, group=group_in(1))
            assert job.id != ran[0]
            ran += await claimable(other)
            assert ran[1:] == [job.id], ran


@pytest.mark.parametrize(("where", "entry"), [(0, "applied"), (1, "applied"), (1, "lost")],
                         ids=["group-of-key-partition", "group-elsewhere", "group-elsewhere-entry-lost"])
async def test_a_trashed_jobs_key_expires_after_key_retention(cluster_seeds: str, where: int,  # noqa: F811
                                                              entry: str) -> None:
    """As on one slot: a key finds its trashed job for key_retention seconds, then a post makes a new job (with
    trash_ttl=0, the trash entry kept for ever); 'lost': the settle's entry to the key's partition never came
    (the record made persistent again), the key still lets the trashed job go after the retention."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=1&trash_ttl=0")) as board:
            backend, key = spread(board), key_in(0)
            job = await board.post("charge", key=key, group=group_in(where))
            await board.trash(await board.claim(job, "w"), "bad")
            trashed = time.monotonic()
            if entry == "lost":
                part = backend.parts[0]
                await part.client.command("PERSIST", part.options.prefix + "k:" + key)
            found = await board.post("charge", key=key)
            if time.monotonic() - trashed < 0.9:  # within the retention (a loaded machine may take longer)
                assert found.id == job.id
            await anyio.sleep(1.6)
            again = await board.post("charge", key=key)
            assert again.id != job.id, "the key still finds the trashed job past key_retention"
            assert (await board.post("charge", key=key, group=group_in(2))).id == again.id


async def test_a_requeued_job_takes_its_key_again_or_loses_it(cluster_seeds: str) -> None:  # noqa: F811
    """A trashed job whose key's record is elsewhere, requeued within the retention: its key finds it again
    (and keeps finding it past the retention); requeued after another job took the key: it loses its key, as
    on one slot; never two claimable jobs that a key finds."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=1")) as board:
            key, other_key = key_in(0), key_in(0, "o")
            job = await board.post("charge", key=key, group=group_in(1))
            await board.trash(await board.claim(job, "w"), "bad")
            assert (await board.requeue(job)).id == job.id
            await anyio.sleep(1.6)
            assert (await board.post("charge", key=key)).id == job.id  # on the board: the key finds it
            late = await board.post("charge", key=other_key, group=group_in(2))
            await board.trash(await board.claim(late, "w"), "bad")
            await anyio.sleep(1.6)
            newer = await board.post("charge", key=other_key)
            assert newer.id != late.id
            assert (await board.requeue(late)).id == late.id
            for group in (group_in(2), group_in(1), None):  # its own partition's record no longer names it
                assert (await board.post("charge", key=other_key, group=group)).id == newer.id
            assert sorted(await claimable(board)) == sorted([job.id, late.id, newer.id])


async def test_a_held_job_cancelled_meanwhile_can_be_requeued(cluster_seeds: str) -> None:  # noqa: F811
    """The held job cancelled before its poster named and released it: the post answers it, trashed; requeue
    refuses while it is held (its post not finished), then works as for any cancelled job."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board:
            backend, key = spread(board), key_in(0)
            arbitrate = backend.keys.arbitrate
            cancelled: list[str] = []

            async def cancel_first(part: RedisBackend, key_: str, job_id: str, **kwargs: Any) -> Any:
                await board.cancel(job_id, "operator")
                cancelled.append(job_id)
                with pytest.raises(InvalidJob, match="held by its keyed post"):
                    await board.requeue(job_id)
                return await arbitrate(part, key_, job_id, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(backend.keys, "arbitrate", cancel_first)
                job = await board.post("charge", key=key, group=group_in(1))
            assert cancelled == [job.id]
            assert (await board.requeue(job)).id == job.id
            assert await claimable(board) == [job.id]
            assert (await board.post("charge", key=key)).id == job.id


@pytest.mark.parametrize("retention", [0, 30])
async def test_a_settle_makes_the_keys_record_elsewhere_expire(cluster_seeds: str, retention: int) -> None:  # noqa: F811
    """A consume and a trash of jobs whose key's record is in another partition: one call each (their entries
    wait in the outbox for the next forwarding); forwarded, the record expires after key_retention (at once
    with 0) and leaves the checks' schedule, as on one slot."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, f"&key_retention={retention}")) as board:
            part = spread(board).parts[0]
            prefix = part.options.prefix
            keys = [key_in(0), key_in(0, "ключ-")]  # a key of UTF-8 bytes: the settle's CRC-16 as the router's
            jobs = [await board.post("charge", key=key, group=group_in(1)) for key in keys]
            for key, job in zip(keys, jobs, strict=True):
                assert await part.client.command("GET", prefix + "k:" + key) == job.id.encode()
                assert await part.client.command("PTTL", prefix + "k:" + key) == -1
                assert await part.client.command("ZSCORE", prefix + "kf", key) is not None
            claims = [await board.claim(job, "w") for job in jobs]
            calls = counting(spread(board))
            await board.consume(claims[0])
            await board.trash(claims[1], "bad")
            assert calls == ["consume", "trash"]
            group_part = spread(board).parts[1]
            assert await group_part.client.command("LLEN", group_part.options.prefix + "out") == 2
            await spread(board).links.forward(group_part)  # as the next forwarding or sweep does
            assert calls[2:] == ["out_read", "key_settled", "out_done", "out_read"]  # the last: none left
            for key in keys:
                ttl = await part.client.command("PTTL", prefix + "k:" + key)
                assert (ttl == -2) if retention == 0 else (0 < ttl <= retention * 1000), (key, ttl)
                assert await part.client.command("ZSCORE", prefix + "kf", key) is None
            assert await group_part.client.command("LLEN", group_part.options.prefix + "out") == 0


async def test_one_sweep_clears_a_backlog_of_records_due(cluster_seeds: str) -> None:  # noqa: F811
    """120 records due naming jobs of which nothing is left (as settles whose entries were lost would leave):
    one sweep of the partition removes them all, not 50 (it asks again while a call answers its limit)."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds)) as board:
            backend = spread(board)
            part, job = backend.parts[0], await board.post("charge", group=group_in(1))
            prefix = part.options.prefix
            keys = [key_in(0, f"b{n}-") for n in range(120)]
            gone = str(int(job.id) + 3 * 1000)  # partition 1's id never posted
            for key in keys:
                await part.client.command("SET", prefix + "k:" + key, gone)
                await part.client.command("ZADD", prefix + "kf", 0, key)
            await backend.keys.sweep(part)
            assert await part.client.command("ZCARD", prefix + "kf") == 0
            assert [key for key in keys if await part.client.command("EXISTS", prefix + "k:" + key)] == []


async def test_a_post_racing_the_requeue_of_an_old_trashed_job_makes_no_second_job(cluster_seeds: str) -> None:  # noqa: F811
    """Review B's N2: the requeue of a trash entry older than key_retention (its key free again), a post of the
    key landing between the requeue's key_take and its partition's requeue: the post answers the job being
    requeued, so one job of the key is claimable."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=1")) as board, \
                open_board(board.url) as other:
            key = key_in(0)
            job = await board.post("charge", key=key, group=group_in(1))
            await board.trash(await board.claim(job, "w"), "bad")
            await anyio.sleep(1.6)
            requeue = RedisBackend.requeue
            raced: list[str] = []

            async def racing(self: RedisBackend, job_id: str, reset_attempts: bool) -> Any:
                raced.append((await other.post("charge", key=key)).id)
                return await requeue(self, job_id, reset_attempts)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisBackend, "requeue", racing)
                await board.requeue(job)
            assert raced == [job.id]
            assert await claimable(other) == [job.id]


@pytest.mark.parametrize("retention", [0, 1])
async def test_a_stale_key_entry_forwarded_after_a_requeue_keeps_the_key(cluster_seeds: str,  # noqa: F811
                                                                         retention: int) -> None:
    """Review C1: another board's sweep read the trash's 'key' outbox entry and is slow to apply it; meanwhile
    the job is requeued (its forward applies the entry, its key_take names the job again). The late entry is
    of the settle before the requeue: it leaves the record naming the requeued job, so a post of the key
    answers that job (before: it expired the record, and the post made a second claimable job)."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, f"&key_retention={retention}")) as board, \
                open_board(board.url) as other:
            key = key_in(0)
            job = await board.post("charge", key=key, group=group_in(1))
            await board.trash(await board.claim(job, "w"), "bad")
            links = spread(other).links
            settle = links._settle_keys
            read, go = anyio.Event(), anyio.Event()

            async def slow(*args: Any) -> None:
                read.set()
                await go.wait()
                await settle(*args)

            links._settle_keys = slow  # type: ignore[method-assign]
            async with anyio.create_task_group() as tg:
                tg.start_soon(links.forward, spread(other).parts[1])  # as its sweep does
                await read.wait()
                assert (await board.requeue(job)).id == job.id
                go.set()
            await anyio.sleep(retention + 0.6)
            again = await board.post("charge", key=key)
            assert sorted(await claimable(board)) == [job.id], \
                f"two jobs of one key claimable: requeued {job.id}, then posted {again.id}"


async def test_a_requeue_mark_does_not_outlive_the_requeue(cluster_seeds: str) -> None:  # noqa: F811
    """Review C5: requeue_mark's 'rq' went with the trash entry into the job (RENAME) and back into the next
    trash entry: trashed again right after its requeue, the job's key kept finding it past key_retention."""
    with anyio.fail_after(30):
        async with open_board(url_of(cluster_seeds, "&key_retention=1&trash_ttl=0")) as board:
            key = key_in(0)
            job = await board.post("charge", key=key, group=group_in(1))
            await board.trash(await board.claim(job, "w"), "bad")
            await anyio.sleep(1.6)
            assert (await board.requeue(job)).id == job.id
            await board.trash(await board.claim(job, "w"), "bad again")
            await anyio.sleep(1.6)
            again = await board.post("charge", key=key)
            assert again.id != job.id, "the key still finds the re-trashed job past key_retention ('rq' left)"
