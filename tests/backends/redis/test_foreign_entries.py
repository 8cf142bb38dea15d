"""Entries no board wrote, under a redis:// board's prefix: each is skipped and reported (or refused with a clear
error), and never leaves a claim held by nobody, a background loop dead, or a listing failing for every caller.

Found by the review of c7b178a (the tenth session); every case failed on c7b178a: outbox entries with a payload
no board writes or an over-long id (every forwarding failed, the sweep died), postings and last errors with
numbers that overflow (the claim made, then lost to the read), non-numeric attempt counts, trash entries that
are no hash or have a non-numeric time (listing, purge, retention), a layout record that is not one, an event
naming an over-long id."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

import anyio
import msgpack
import pytest

from jobboard import JobBoard, JobState, open_board
from jobboard.errors import JobBoardError
from jobboard_redis import RedisBackend
from jobboard_redis.client import RedisClient
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread import links as links_module
from jobboard_redis.spread.flow import group_index
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(60)


# -- 1. an outbox entry whose payload is not a string/int: every forwarding raises TypeError, the sweep dies --

def bogus_entries() -> list[Any]:
    """Outbox entries no board writes, each with a dependent and dependency named D and P (filled in later)."""
    entries: list[Any] = [b"not msgpack \xc1", [b"bogus", "D", "P", b""], [b"trash", b"not-an-id", "P", b"reason"],
                          [1, 2]]
    return entries + [[b"deliver", "D", "P", payload] for payload in (None, [1, 2], {"a": 1}, True)]


@pytest.mark.parametrize("bogus", bogus_entries())
async def test_an_outbox_entry_no_board_wrote_is_skipped_reported_and_removed(
        bogus: Any, cluster_seeds: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """An entry in a partition's outbox that no board wrote (not msgpack, an unknown kind, a dependent that is not a
    job id, a payload that is not a string) is skipped, logged and removed; the consume that forwards past it
    returns, and the entry it wrote after it is applied. Before: out_read raised on the first, and a payload that
    is not a string failed the forwarding (so every forwarding and sweep of the partition, and the consume with
    it); an unknown kind was applied as a trash."""
    url = f"redis://{cluster_seeds}/0/foreign-out-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        dependency = await board.post("x")  # home
        part = backend.part_of(dependency.id)
        group = next(f"g{n}" for n in range(100) if group_index(f"g{n}", 3) != backend.parts.index(part))
        dependent = await board.post("y", depends_on=[dependency], group=group)
        names = {"D": dependent.id.encode(), "P": dependency.id.encode()}
        entry = bogus if isinstance(bogus, bytes) else msgpack.packb([names[field] if isinstance(field, str) else field for field in bogus])
        await part.client.command("RPUSH", part.options.prefix + "out", entry)
        claim = await board.claim_next("w")
        assert claim is not None and claim.job.id == dependency.id
        with caplog.at_level(logging.ERROR, logger="jobboard_redis.spread.links"):
            await board.consume(claim, {"done": 1})
        assert sum("malformed outbox entry" in record.getMessage() for record in caplog.records) == 1
        assert await part.client.command("LLEN", part.options.prefix + "out") == 0
        assert await board.state(dependent) is JobState.UNCLAIMED  # delivered, not trashed by the bogus entry
        following = await board.claim_next("w")
        assert following is not None and following.job.id == dependent.id
        assert following.dependency_results == ({"done": 1},)
        await board.consume(following)


async def test_the_sweep_survives_an_outbox_entry_with_a_payload_no_board_writes(
        cluster_seeds: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The sweep task catches JobBoardError only: a TypeError out of forward() ends it for good."""
    monkeypatch.setattr(links_module, "SWEEP", 0.2)
    url = f"redis://{cluster_seeds}/0/foreign-sweep-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        part = backend.parts[0]
        bogus = msgpack.packb([b"trash", b"123", b"456", None])
        await part.client.command("RPUSH", part.options.prefix + "out", bogus)
        await anyio.sleep(1.0)
        sweeps = [task for task in backend.services.tasks if getattr(task.get_coro(), "__qualname__", "") == "Forwarder.sweep_forever"]
        assert sweeps and not sweeps[0].done(), "the outboxes' sweep ended (TypeError out of forward)"


async def test_an_outbox_entry_whose_dependent_is_too_long_an_id_is_skipped(cluster_seeds: str) -> None:  # noqa: F811
    """outbox_entry accepts any digits; part_of's int() refuses more than 4300 (ValueError, not JobBoardError)."""
    url = f"redis://{cluster_seeds}/0/foreign-long-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        part = backend.parts[0]
        bogus = msgpack.packb([b"trash", b"1" * 5000, b"456", b"reason"])
        await part.client.command("RPUSH", part.options.prefix + "out", bogus)
        await backend.links.forward(part)  # ValueError: Exceeds the limit (4300 digits)
        assert await part.client.command("LLEN", part.options.prefix + "out") == 0


# -- 2. a posting whose numbers overflow: the claim is made, then the read raises OverflowError ----------------

def overflowing_posting(raw: bytes, field: str) -> bytes:
    record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    record[field] = float("inf")
    return bytes(msgpack.packb(record, use_bin_type=True))


@pytest.mark.parametrize("field", ["max_attempts", "attempts"])
async def test_a_claimed_posting_that_overflows_is_set_aside_not_left_claimed(field: str, redis_url: str) -> None:
    url = f"{redis_url}/0/foreign-ovf-{uuid.uuid4().hex}?session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, RedisBackend)
        bad = await board.post("x")
        good = await board.post("x")
        key = f"{backend.options.prefix}job:{bad.id}"
        raw = await backend.client.command("HGET", key, "p")
        await backend.client.command("HSET", key, "p", overflowing_posting(raw, field))
        claim = await board.claim_next("w")  # OverflowError: cannot convert float infinity to integer
        assert claim is not None and claim.job.id == good.id
        await board.consume(claim)


async def test_claim_many_does_not_lose_its_claims_to_one_overflowing_posting(redis_url: str) -> None:
    url = f"{redis_url}/0/foreign-ovf-many-{uuid.uuid4().hex}?session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, RedisBackend)
        jobs = [await board.post("x") for _ in range(3)]
        key = f"{backend.options.prefix}job:{jobs[1].id}"
        raw = await backend.client.command("HGET", key, "p")
        await backend.client.command("HSET", key, "p", overflowing_posting(raw, "max_attempts"))
        try:
            claims = await board.claim_many("w", 3)
        except Exception as error:  # noqa: BLE001
            states = [await board.state(job.id) for job in jobs]
            pytest.fail(f"claim_many raised {error!r}; the jobs are left {states} (held by nobody)")
        assert [claim.job.id for claim in claims] == [jobs[0].id, jobs[2].id]


async def test_a_stored_error_that_overflows_does_not_leave_the_claim_held_by_nobody(redis_url: str) -> None:
    """The job hash's 'err' field (written by an abandon) with attempt = inf: error_of catches ValueError,
    TypeError, KeyError, not OverflowError."""
    url = f"{redis_url}/0/foreign-err-{uuid.uuid4().hex}?session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, RedisBackend)
        bad = await board.post("x")
        err = msgpack.packb({"type": "E", "message": "m", "attempt": float("inf"), "at": 0.0})
        await backend.client.command("HSET", f"{backend.options.prefix}job:{bad.id}", "err", err)
        claim = await board.claim_next("w")
        assert claim is None or claim.job.id == bad.id


# -- 3. a job hash whose attempts or max attempts is not a number: claim_next raises for every caller -----------

@pytest.mark.parametrize("field", ["att", "maxa"])
async def test_a_job_hash_with_a_non_numeric_count_does_not_stop_every_claim(field: str, redis_url: str) -> None:
    url = f"{redis_url}/0/foreign-att-{uuid.uuid4().hex}?session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, RedisBackend)
        bad = await board.post("x", max_attempts=3)
        good = await board.post("x")
        await backend.client.command("HSET", f"{backend.options.prefix}job:{bad.id}", field, "not a number")
        claim = await board.claim_next("w")  # 'attempt to compare nil with number' (board.lua exhausted())
        assert claim is not None
        await board.consume(claim)
        claim = await board.claim_next("w")
        assert claim is None or claim.job.id in (bad.id, good.id)


# -- 4. the layout record ------------------------------------------------------------------------------------

@pytest.mark.parametrize("record", ["3 1 2", "3 a b c", "x"])
async def test_a_layout_record_no_board_wrote_is_refused_clearly(record: str, cluster_seeds: str) -> None:  # noqa: F811
    root = f"foreign-layout-{uuid.uuid4().hex}"
    url = f"redis://{cluster_seeds}/0/{root}?cluster=1&partitions=3"
    async with open_board(url) as board:  # writes the layout
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        control = f"jb:{{{root}}}:layout"
        options = parse_redis_url(url)
        client = RedisClient(dataclasses.replace(options, partitions=1))
        try:
            assert await client.command("GET", control) is not None
            await client.command("SET", control, record)
        finally:
            await client.close()
    with pytest.raises(JobBoardError):
        async with open_board(url) as board:
            backend = board.backend
            assert isinstance(backend, SpreadBackend)
            pytest.fail(f"opened over {len(backend.parts)} partitions of a board of 3 ({record!r})")


# -- 5. trash entries no board wrote ---------------------------------------------------------------------------

async def trashed_job(board: JobBoard) -> tuple[RedisBackend, str]:
    """A job posted and cancelled on ``board``: its backend and the job's id."""
    backend = board.backend
    assert isinstance(backend, RedisBackend)
    job = await board.post("x")
    await board.cancel(job, "gone")
    return backend, job.id


async def test_trashed_skips_a_trash_entry_that_is_not_a_hash(redis_url: str) -> None:
    """read_trashed pipelines without errors_in_place: one foreign key in the trash index fails every listing."""
    async with open_board(f"{redis_url}/0/foreign-tr-{uuid.uuid4().hex}") as board:
        backend, good = await trashed_job(board)
        await backend.client.command("ZADD", f"{backend.options.prefix}trash", "0", "999999")
        await backend.client.command("SET", f"{backend.options.prefix}tr:999999", "written by another tool")
        assert [item.job.id async for item in board.trashed()] == [good]


async def test_trashed_skips_a_trash_entry_whose_posting_overflows(redis_url: str) -> None:
    async with open_board(f"{redis_url}/0/foreign-tr-{uuid.uuid4().hex}") as board:
        backend, bad = await trashed_job(board)
        key = f"{backend.options.prefix}tr:{bad}"
        await backend.client.command("HSET", key, "p", overflowing_posting(
            await backend.client.command("HGET", key, "p"), "max_attempts"))
        assert [item.job.id async for item in board.trashed()] == []


async def test_purge_skips_a_trash_entry_with_a_malformed_time(redis_url: str) -> None:
    async with open_board(f"{redis_url}/0/foreign-purge-{uuid.uuid4().hex}") as board:
        backend, bad = await trashed_job(board)
        _, good = await trashed_job(board)
        await backend.client.command("HSET", f"{backend.options.prefix}tr:{bad}", "at", "not a time")
        assert await board.purge() >= 1  # 'attempt to perform arithmetic on a nil value' (keep.lua purge)
        assert await board.state(good) is not JobState.TRASHED


async def test_retention_passes_a_trash_entry_that_is_not_a_hash(redis_url: str) -> None:
    async with open_board(f"{redis_url}/0/foreign-ret-{uuid.uuid4().hex}?trash_ttl=0.5") as board:
        backend, good = await trashed_job(board)
        prefix = backend.options.prefix
        await backend.client.command("ZADD", f"{prefix}tdef", "0", "999999")
        await backend.client.command("SET", f"{prefix}tr:999999", "written by another tool")
        await anyio.sleep(1.5)
        assert await backend.client.command("EXISTS", f"{prefix}tr:{good}") == 0, "retention stuck behind it"


# -- 6. a stream entry no board wrote ends the event reader ----------------------------------------------------

def test_a_stream_entry_naming_a_run_of_a_huge_id_is_read_as_one_job() -> None:
    from jobboard_redis.view import _run_of
    assert _run_of("1" * 5000 + "+3") is None  # ValueError (int() limit): raised out of BoardView._read_once


# -- 6. a refusal that is not about the data (an ACL's) is raised, never taken for a foreign entry --------------

async def acl_user(board: JobBoard, refused: str) -> str:
    """A user of the board's server to whom ``refused`` is refused (ACL), and the board's URL for that user."""
    backend = board.backend
    assert isinstance(backend, RedisBackend)
    name = f"refused-{refused}-{uuid.uuid4().hex[:8]}"
    await backend.client.command("ACL", "SETUSER", name, "reset", "on", ">pw", "~*", "&*", "+@all", f"-{refused}")
    return board.url.replace("redis://", f"redis://{name}:pw@", 1)


@pytest.mark.parametrize("listing", ["trashed", "iterjobs"])
async def test_a_listing_refused_by_an_acl_raises_not_reads_as_malformed(listing: str, redis_url: str) -> None:
    """``HMGET`` refused by the user's ACL (NOPERM: permanent) fails the listing with a ``JobBoardError`` naming
    the ACL; with d886001 every row read as a malformed entry, and ``trashed()`` (as ``iterjobs()`` before it)
    listed nothing, without an error."""
    async with open_board(f"{redis_url}/0/foreign-acl-{uuid.uuid4().hex}") as admin:
        await trashed_job(admin)
        await admin.post("x")
        async with open_board(await acl_user(admin, "hmget")) as reader:
            with pytest.raises(JobBoardError, match="ACL|permission"):
                [item async for item in getattr(reader, listing)()]


async def test_purge_refused_by_an_acl_raises_and_drops_nothing(redis_url: str) -> None:
    """``HGET`` refused inside ``purge`` (an ACL) raises; with d886001 the refusal read as a trash entry with no
    time, and ``purge(older_than=3600)`` dropped an entry trashed a moment before."""
    async with open_board(f"{redis_url}/0/foreign-acl-{uuid.uuid4().hex}") as admin:
        _, trashed = await trashed_job(admin)
        async with open_board(await acl_user(admin, "hget")) as purger:
            with pytest.raises(JobBoardError, match="can't run this command"):  # Redis's words for an ACL's refusal
                await purger.purge(older_than=3600)
        assert [item.job.id async for item in admin.trashed()] == [trashed]


async def test_a_trash_time_of_inf_does_not_stop_every_purge(redis_url: str) -> None:
    """A trash entry whose time is ``inf`` (no board writes one) is dropped by ``purge`` as one with no time; it
    stopped every purge at it (an entry newer than any age)."""
    async with open_board(f"{redis_url}/0/foreign-purge-{uuid.uuid4().hex}") as board:
        backend, bad = await trashed_job(board)
        await backend.client.command("HSET", f"{backend.options.prefix}tr:{bad}", "at", "inf")
        assert await board.purge(older_than=3600) == 1
        assert [item async for item in board.trashed()] == []
