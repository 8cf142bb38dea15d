"""zookeeper:// ``post_many`` in chunked multis: a chunk whose reply or request is lost is
resolved by its write marker, so no job is posted twice and none is lost."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard_zookeeper import ZooKeeperBackend, batching
from tests.support.faultproxy import FaultLink

pytestmark = pytest.mark.timeout(60)

JOBS = 700
CHUNK = 100


@pytest.fixture
async def link(zk_hosts: str) -> AsyncIterator[FaultLink]:
    host, port = zk_hosts.rsplit(":", 1)
    async with FaultLink([(host, int(port))]) as running:
        yield running


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "CHUNK_JOBS", CHUNK)


@pytest.mark.parametrize("fault", ["lose_reply", "lose_request"])
@pytest.mark.parametrize("chunk", [0, 3])
async def test_a_chunk_whose_reply_or_request_is_lost_is_posted_exactly_once(
        link: FaultLink, fault: str, chunk: int) -> None:
    url = f"zookeeper://{link.hosts}/batches/{uuid.uuid4().hex}?session_timeout=10"
    with anyio.fail_after(45):
        async with open_board(url) as board:
            if chunk:
                await board.post_many([NewJob("warm", {"i": i}) for i in range(chunk * CHUNK)])
            getattr(link, fault)(posts_only=True)  # the next chunk's multi
            jobs = await board.post_many([NewJob("j", {"i": i}, key=f"k{i}" if i % 7 == 0 else None)
                                          for i in range(JOBS)])
            assert link.faults.done["lost_" + fault.removeprefix("lose_")] == 1
            assert [job.details["i"] for job in jobs] == list(range(JOBS))
            stored = [job async for job in board.iterjobs() if job.name == "j"]
    assert sorted(int(job.details["i"]) for job in stored) == list(range(JOBS)), "a job was lost or posted twice"
    assert [job.id for job in stored] == [job.id for job in jobs]  # board order is the order given


async def test_keys_and_dependencies_in_a_batch_behave_as_single_posts(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/batches/{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as board:
            earlier = await board.post("e", key="taken")
            parent = await board.post("parent")
            jobs = await board.post_many([NewJob("a", key="taken"), NewJob("b", key="twice"), NewJob("c"),
                                          NewJob("d", key="twice"), NewJob("w", depends_on=[parent]),
                                          *(NewJob("x") for _ in range(2 * CHUNK))])
            assert jobs[0].id == earlier.id and jobs[1].id == jobs[3].id
            assert len({job.id for job in jobs}) == len(jobs) - 1
            assert await board.job_count() == 2 + len(jobs) - 2
            assert str(await board.state(jobs[4])) == "JobState.WAITING"


async def test_claims_read_their_jobs_ahead_so_a_cycle_is_about_two_requests(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/batches/{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await board.post_many([NewJob("j", {"i": i}) for i in range(64)])
            assert isinstance(board.backend, ZooKeeperBackend)
            before = board.backend.zk.requests_sent
            done = []
            while (claim := await board.claim_next("me")) is not None:
                done.append(claim.job.details["i"])
                await board.consume(claim)
            requests = board.backend.zk.requests_sent - before
    assert done == list(range(64))  # board order, one by one
    assert requests / 64 < 2.3, f"{requests / 64:.2f} requests per cycle (3 with a read before each claim)"


async def test_a_stale_read_ahead_cannot_make_a_wrong_claim(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/batches/{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as board, open_board(url) as rival:
            assert isinstance(board.backend, ZooKeeperBackend)
            job = await board.post("j", max_attempts=5)
            stale = await board.backend.zk.get(board.backend._paths.job(job.id))  # as read ahead, before the rival's turn
            await rival.abandon(await rival.claim(job, "rival"))
            assert (await board.get(job)).attempts == 1  # ZooKeeper sends the events before this reply
            board.backend.view.prefetched[job.id] = stale  # a read that crossed the rival's events
            assert await board.claim_next("me") is None  # the stale version failed the claim's multi
            assert board.backend.claim_conflicts == 1
            claim = await board.claim_next("me")  # read afresh
            assert claim is not None and claim.generation == 2 and claim.job.attempts == 2


async def test_a_failed_chunk_stops_the_batch_before_post_many_raises(
        zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks not yet sent when one fails are not sent, and ``post_many`` raises only once the
    chunks in flight have ended: nothing of the batch is written after the caller saw the error."""
    from jobboard.errors import BackendUnavailable

    events: list[str] = []
    real_post_chunk = batching.BatchPoster._post_chunk

    async def post_chunk(self: batching.BatchPoster, chunk: list[batching.Prepared], order: batching.Order) -> list:
        index = int(chunk[0][0].details["i"]) // CHUNK
        events.append(f"start {index}")
        if index == 0:
            batching.Order.done(order.placed)
            await anyio.sleep(0.01)
            raise BackendUnavailable("chunk 0 failed")
        await anyio.sleep(0.1)
        jobs = await real_post_chunk(self, chunk, order)
        events.append(f"end {index}")
        return jobs

    monkeypatch.setattr(batching.BatchPoster, "_post_chunk", post_chunk)
    with anyio.fail_after(30):
        async with open_board(f"zookeeper://{zk_hosts}/batches/{uuid.uuid4().hex}") as board:
            with pytest.raises(BackendUnavailable, match="chunk 0 failed"):
                await board.post_many([NewJob("j", {"i": i}) for i in range(8 * CHUNK)])
            events.append("raised")
            await anyio.sleep(0.3)
            in_flight = [f"start {index}" for index in range(batching.IN_FLIGHT)]
            assert events[:batching.IN_FLIGHT] == in_flight
            assert sorted(events[batching.IN_FLIGHT:-1]) == sorted(f"end {i}" for i in range(1, batching.IN_FLIGHT))
            assert events[-1] == "raised"
            assert await board.job_count() == (batching.IN_FLIGHT - 1) * CHUNK
