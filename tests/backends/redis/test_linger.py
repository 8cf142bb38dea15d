"""redis://?linger=: a board's calls wait up to ``linger`` seconds for others to share their write, so that a
process with one slot settling its held jobs (``prefetch``) sends several consumes in one write and the server
reads them once (issue 28: a fleet of small worker processes costs the server what one big process costs)."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from jobboard import InvalidURL, JobContext, JobState, NewJob, open_board
from jobboard.worker import Worker, WorkerConfig
from jobboard_redis import RedisBackend
from jobboard_redis.options import parse_redis_url

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("value", ["-1", "0.5", "soon", "nan"])
def test_a_linger_out_of_range_is_a_clear_url_error(value: str) -> None:
    with pytest.raises(InvalidURL, match=r"linger.*from 0 to 0\.1"):
        parse_redis_url(f"redis://127.0.0.1:6379/0/b?linger={value}")


def test_linger_is_off_unless_asked_for() -> None:
    assert parse_redis_url("redis://127.0.0.1:6379/0/b").linger == 0
    assert parse_redis_url("redis://127.0.0.1:6379/0/b?linger=0.002").linger == 0.002


async def server_reads(board: Any) -> int:
    assert isinstance(board.backend, RedisBackend)
    info = await board.backend.client.command("INFO", "stats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return int(next(line for line in text.splitlines() if line.startswith("total_reads_processed:")).split(":")[1])


async def one_slot_worker_run(url: str, jobs: int) -> tuple[float, list[JobState]]:
    """A one-slot worker with ``prefetch`` runs ``jobs`` no-op jobs: the server's socket reads per job."""

    async def done(ctx: JobContext) -> None:
        return None

    async with open_board(url) as board:
        posted = await board.post_many([NewJob("j", {"n": number}) for number in range(jobs)])
        before = await server_reads(board)
        worker = Worker(board, done, WorkerConfig(concurrency=1, prefetch=16, burst=True))
        with anyio.fail_after(40):
            stats = await worker.run()
        reads = await server_reads(board) - before
        states = [await board.state(job) for job in posted]
    assert stats.consumed == jobs
    return reads / jobs, states


async def test_a_one_slot_worker_s_consumes_share_writes_with_linger(redis_url: str) -> None:
    """Without linger each consume is a write and a server read of its own (the slot starts its next held job
    while the consume is in flight, and the reply is back before the next ends); with ``linger=0.02`` the
    consumes made within it go together: a fraction of a read a job (every other board's reads included)."""
    jobs = 300
    plain, states = await one_slot_worker_run(f"{redis_url}/0/linger-{uuid.uuid4().hex}", jobs)
    assert states == [JobState.COMPLETE] * jobs
    lingering, states = await one_slot_worker_run(f"{redis_url}/0/linger-{uuid.uuid4().hex}?linger=0.02", jobs)
    assert states == [JobState.COMPLETE] * jobs
    assert lingering < 0.5 and 2 * lingering < plain, (lingering, plain)  # seen: 0.13 against 1.05-1.07
