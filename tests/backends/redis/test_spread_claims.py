"""Claims ahead on a spread board (``claim_many``, ``release``, ``claim_lost``): what the review of 123b636 found.

Each case failed on 123b636: a ``claim_many`` whose home had jobs waited for a paused master elsewhere; a claim
stolen while another partition's parked jobs were being counted, or made by a call that forwards to another
partition, was left claimed by nobody when the call was cancelled; a worker holding a claim ahead started it
after the job was claimed again under its own name.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest
import redis

from jobboard import JobContext, JobState, Priority, open_board
from jobboard.errors import JobBoardError
from jobboard.worker.ahead import HELD_FRESH
from jobboard.worker.handlers import as_async
from jobboard_redis.cluster import key_slot
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread.flow import group_index
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401 (a fixture)
from tests.worker.test_prefetch import holding_one_ahead

pytestmark = pytest.mark.timeout(60)


@contextmanager
def paused_master(seeds: str, prefix: str, ms: int) -> Iterator[None]:
    """The master serving the keys of ``prefix`` paused (``CLIENT PAUSE ms ALL``), unpaused at the end."""
    host, port = seeds.split(",")[0].split(":")
    with redis.Redis(host=host, port=int(port)) as node:
        slot = key_slot(prefix + "x")
        master = next(int(entry[2][1]) for entry in node.execute_command("CLUSTER", "SLOTS")
                      if int(entry[0]) <= slot <= int(entry[1]))
    with redis.Redis(host=host, port=master) as paused:
        paused.execute_command("CLIENT", "PAUSE", str(ms), "ALL")
        try:
            yield
        finally:
            paused.execute_command("CLIENT", "UNPAUSE")


async def test_claim_many_with_work_at_home_does_not_wait_for_the_other_partitions(cluster_seeds: str) -> None:  # noqa: F811
    """Home has 2 jobs, the other partition's master is paused: ``claim_many(4)`` returns home's 2 at once (on
    123b636 it waited 3 s to steal, and raised once the pause outlasted the retries)."""
    url = f"redis://{cluster_seeds}/0/slow-{uuid.uuid4().hex}?cluster=1&partitions=2"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        mine = [(await board.post("x")).id for _ in range(2)]
        other = backend.parts[1 - backend.home]
        with paused_master(cluster_seeds, other.options.prefix, 2000):
            started = time.monotonic()
            claims = await board.claim_many("w", 4)
            took = time.monotonic() - started
        assert [claim.job.id for claim in claims] == mine and took < 1.0, took
        for claim in claims:
            await board.consume(claim)


async def test_a_claim_stolen_while_counting_parked_jobs_goes_back_when_cancelled(cluster_seeds: str) -> None:  # noqa: F811
    """A steal claims in one partition, then asks another, which holds jobs parked by a rate, to count them
    (``passed_before``); cancelled there, the stolen claim goes back (it stayed claimed by nobody before)."""
    url = f"redis://{cluster_seeds}/0/parked-{uuid.uuid4().hex}?cluster=1&partitions=3&session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend) and backend.home == 0  # the first board of its root
        await board.set_limit("rated", rate=(1, 600.0))  # the group's partition: 1
        rated = [await board.post("x", group="rated") for _ in range(2)]
        first = await board.claim_next("w")
        assert first is not None and first.job.id == rated[0].id
        assert await board.claim_next("w") is None  # rated[1] parked in partition 1
        loose = await board.post("x", group="one")  # partition 2, no limit
        counting, real = backend.parts[1], backend.parts[1].passed_before
        counted: list[float | None] = []

        async def slowly(score: float | None, names: object) -> None:
            counted.append(score)
            await anyio.sleep(1.0)
            await real(score, names)  # type: ignore[arg-type]

        counting.passed_before = slowly  # type: ignore[method-assign]
        with anyio.move_on_after(0.5):
            await board.claim_many("w", 2)
        counting.passed_before = real  # type: ignore[method-assign]
        assert counted, "the steal never counted partition 1's parked jobs"
        for _ in range(200):
            if await board.owner(loose) is None:
                break
            await anyio.sleep(0.01)
        assert await board.owner(loose) is None, "the stolen claim was left claimed"
        assert (await board.get(loose)).attempts == 0  # given back uncounted


@pytest.mark.parametrize("kind", ["flat", "spread"])
async def test_a_held_claim_claimed_again_under_the_workers_name_is_not_started(kind: str, cluster_seeds: str) -> None:  # noqa: F811
    """A worker holds a claim ahead; the job is given back and claimed again under the worker's own name (as its
    other claimer would): the held claim is dropped, not started (the spread board started it on 123b636: its
    ``claim_lost`` was the interface's, which reads state and owner only)."""
    extra = "&partitions=3" if kind == "spread" else ""
    url = f"redis://{cluster_seeds}/0/same-{uuid.uuid4().hex}?cluster=1{extra}"
    with anyio.fail_after(40):
        async with open_board(url) as board:
            first = await board.post("x", priority=Priority.HIGH)
            held = await board.post("x")
            go_on = threading.Event()
            started: list[tuple[str, int]] = []

            def handler(ctx: JobContext) -> None:
                started.append((ctx.job.id, ctx.claim.generation))
                if ctx.job.id == first.id:
                    go_on.wait(20)

            async with holding_one_ahead(board, as_async(handler)) as (worker, stale):
                await board.abandon(stale)
                again = await board.claim(held, worker.owner)
                await anyio.sleep(HELD_FRESH)
                go_on.set()
            await board.consume(again)
    assert stale.job.id == held.id and (held.id, stale.generation) not in started, started


@pytest.mark.parametrize("failure", ["cancelled", "permanent"])
async def test_a_claim_whose_call_forwards_to_another_partition_goes_back_when_the_forwarding_fails(
        failure: str, cluster_seeds: str) -> None:  # noqa: F811
    """A ``claim_next`` that trashes an exhausted job with a dependent in another partition forwards the trash
    there before it returns (the outbox). Cancelled during that forwarding, or the forwarding failing with a
    permanent error (not ``BackendUnavailable``), the job it claimed in the same call goes back: it stayed claimed
    by nobody before, until the board's session ended (the forwarding was outside the call's ``unclaim`` on
    123b636; a permanent error was outside it until the tenth session)."""
    url = f"redis://{cluster_seeds}/0/fwd-{uuid.uuid4().hex}?cluster=1&partitions=3&session_timeout=30"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, SpreadBackend)
        exhausted = await board.post("x", max_attempts=1)  # home
        part = backend.part_of(exhausted.id)
        group = next(f"g{n}" for n in range(100) if group_index(f"g{n}", 3) != backend.parts.index(part))
        dependent = await board.post("y", depends_on=[exhausted], group=group)  # in the group's partition
        following = await board.post("x")  # home, after it
        await part.client.command("HSET", f"{part.options.prefix}job:{exhausted.id}", "att", "1")  # used up
        assert part.forward is not None
        real = part.forward
        forwarded: list[str] = []

        async def failing(partition: object) -> None:
            forwarded.append("started")
            if failure == "permanent":
                raise JobBoardError("a permanent failure of the forwarding")
            await anyio.sleep(1.0)
            await real(partition)  # type: ignore[arg-type]

        part.forward = failing
        if failure == "permanent":
            with pytest.raises(JobBoardError, match="permanent failure"):
                await board.claim_next("w")
        else:
            with anyio.move_on_after(0.5):
                await board.claim_next("w")
        part.forward = real
        assert forwarded, "the claim did not forward the trash"
        assert await board.state(exhausted) is JobState.TRASHED
        for _ in range(200):
            if await board.owner(following) is None:
                break
            await anyio.sleep(0.01)
        assert await board.owner(following) is None, "the claim made with the forwarding was left claimed"
        claim = await board.claim_next("w")
        assert claim is not None and claim.job.id == following.id
        await board.consume(claim)
        await real(part)  # the entry left in the outbox (for the boards' sweep): forwarded, nothing lost
        assert await board.state(dependent) is JobState.TRASHED

