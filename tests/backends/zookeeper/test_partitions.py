"""The partitioned ZooKeeper layout (``?partitions=K``): the recorded layout, members splitting
partitions, a member leaving, stealing, wait() woken by a foreign partition, pins, observers.

The contract itself is checked by the conformance suite on a partitioned board
(tests/backends/zookeeper/test_conformance.py); these tests check what the partitions change.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest

from jobboard import open_board
from jobboard.board.events import EventKind
from jobboard.errors import BoardConflict, InvalidURL
from jobboard.job import Job
from jobboard_zookeeper import ZooKeeperBackend, ZooKeeperBoard
from jobboard_zookeeper.fleet import PartitionedView, owned_partitions
from jobboard_zookeeper.partitions import PartitionedPaths
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)
K = 4
Opener = Callable[..., Awaitable[ZooKeeperBoard]]


@pytest.fixture
async def boards(zk_hosts: str) -> AsyncIterator[Opener]:
    """Open boards on one fresh partitioned root (``suffix`` replaces the query); closed at the end."""
    root = f"zookeeper://{zk_hosts}/partitions/{uuid.uuid4().hex}"
    opened: list[ZooKeeperBoard] = []

    async def opener(query: str = f"?partitions={K}&session_timeout=4") -> ZooKeeperBoard:
        board = open_board(root + query)
        await board.open()
        assert isinstance(board.backend, ZooKeeperBackend)
        opened.append(board)
        return board

    yield opener
    for board in opened:
        await board.aclose()


def fleet(board: ZooKeeperBoard) -> PartitionedView:
    assert isinstance(board.backend.view, PartitionedView)
    return board.backend.view


def partition(board: ZooKeeperBoard, job: Job) -> int:
    paths = board.backend._paths
    assert isinstance(paths, PartitionedPaths)
    return paths.partition_of(job.id)


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110 - the state changes in background tasks
            await anyio.sleep(0.02)


async def two_members(boards: Opener) -> tuple[ZooKeeperBoard, ZooKeeperBoard]:
    a, b = await boards(), await boards()
    assert await a.claim_next("a") is None and await b.claim_next("b") is None  # both join
    await until(lambda: len(fleet(a).current) + len(fleet(b).current) == K)
    return a, b


async def post_into(poster: ZooKeeperBoard, owner: ZooKeeperBoard, name: str = "j") -> Job:
    """Post jobs until one lands in a partition ``owner`` owns (jobs elsewhere are cancelled)."""
    while True:
        job = await poster.post(name)
        if partition(poster, job) in fleet(owner).owned:
            return job
        await poster.cancel(job, "not in the partition wanted")


def test_owned_partitions_split_round_robin() -> None:
    members = ["b", "a", "c"]
    split = [owned_partitions(members, me, 8) for me in sorted(members)]
    assert split == [{0, 3, 6}, {1, 4, 7}, {2, 5}]
    assert owned_partitions(members, "gone", 8) == set()


async def test_the_layout_is_recorded_and_a_mismatch_is_refused(boards: Opener) -> None:
    with anyio.fail_after(30):
        created = await boards()
        assert created.backend._paths.partitions == K
        plain = await boards("")  # no option: the recorded layout
        assert plain.backend._paths.partitions == K
        job = await created.post("j")
        assert (await plain.get(job)).id == job.id
        with pytest.raises(BoardConflict, match=f"created with partitions={K}, not partitions=8"):
            await boards("?partitions=8")


async def test_a_flat_board_stays_flat(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/partitions/{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as flat:
            assert isinstance(flat.backend, ZooKeeperBackend) and flat.backend._paths.partitions == 0
            await flat.post("j")
            with pytest.raises(BoardConflict, match="flat layout"):
                async with open_board(url + "?partitions=4"):
                    pass
            assert await flat.job_count() == 1


@pytest.mark.parametrize("value", ["0", "-1", "x", "1025"])
def test_bad_partition_counts_are_invalid_urls(value: str) -> None:
    with pytest.raises(InvalidURL, match="partitions"):
        open_board(f"zookeeper://127.0.0.1:2181/x?partitions={value}")


async def test_members_split_the_partitions_and_hear_only_theirs(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        assert fleet(a).owned | fleet(b).owned == set(range(K)) and not fleet(a).owned & fleet(b).owned
        poster = await boards()
        heard = a.backend.zk.events_received
        jobs = [await poster.post("j") for _ in range(12)]
        await until(lambda: all(job.id in fleet(b).jobs for job in jobs if partition(a, job) in fleet(b).owned))
        mine = [job for job in jobs if partition(a, job) in fleet(a).owned]
        await until(lambda: all(job.id in a.backend.view.jobs for job in mine))
        assert a.backend.zk.events_received - heard == len(mine)  # one create each, nothing of b's partitions
        assert not any(job.id in a.backend.view.jobs for job in jobs if job not in mine)


async def test_a_member_that_closes_leaves_its_partitions_to_the_others(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        await b.aclose()
        await until(lambda: fleet(a).current == frozenset(range(K)))
        assert fleet(a).owned == set(range(K))


async def test_a_killed_member_s_partitions_are_taken_over(boards: Opener, zk_hosts: str) -> None:
    a = await boards()
    assert await a.claim_next("a") is None
    root = a.backend.options.root
    script = ("import anyio, sys\nfrom jobboard import open_board\n"
              "async def main():\n"
              f"    async with open_board('zookeeper://{zk_hosts}{root}?session_timeout=2') as board:\n"
              "        await board.claim_next('child')\n        print('joined', flush=True)\n"
              "        await anyio.sleep(60)\nanyio.run(main)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
    try:
        with anyio.fail_after(30):
            assert child.stdout is not None
            assert await anyio.to_thread.run_sync(child.stdout.readline) == "joined\n"
            await until(lambda: len(fleet(a).owned) < K)
            os.kill(child.pid, signal.SIGKILL)
            await until(lambda: fleet(a).current == frozenset(range(K)), 20)  # after the session expires
    finally:
        child.kill()
        child.wait()


async def test_an_idle_member_steals_from_a_busy_one(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        job = await post_into(a, b)
        claim = await a.claim_next("thief")
        assert claim is not None and claim.job.id == job.id
        assert a.backend.steals == 1
        await a.consume(claim)
        assert await b.claim_next("b") is None and await a.job_count() == 0


async def test_wait_is_woken_by_work_in_a_foreign_partition(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        poster = await boards()
        while True:  # aim the next post at b's partitions; the fillers are gone before a waits
            filler = await poster.post("filler")
            await poster.cancel(filler, "filler")
            if (partition(poster, filler) + 1) % K in fleet(b).owned:
                break
        async with anyio.create_task_group() as group:
            group.start_soon(post_later, poster)
            found = await a.wait()
        assert [job.name for job in found] == ["target"] and partition(a, found[0]) in fleet(b).owned


async def post_later(poster: ZooKeeperBoard) -> None:
    await anyio.sleep(0.3)
    await poster.post("target")


async def test_watching_a_stolen_claim_pins_its_partition(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        await post_into(a, b)
        claim = await a.claim_next("thief")
        assert claim is not None and a.backend.steals == 1
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_later, b, claim.job)
            assert await a.watch_claim(claim) == "trashed"
        assert partition(a, claim.job) in fleet(a).current  # still watched a moment (UNPIN_DELAY)
        await until(lambda: partition(a, claim.job) not in fleet(a).current)


async def cancel_later(board: ZooKeeperBoard, job: Job) -> None:
    await anyio.sleep(0.2)
    await board.cancel(job, "cancelled")


async def test_waiting_for_a_foreign_job_pins_its_partition(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        job = await post_into(a, b)
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_later, b, job)
            outcome = await a.wait_for_completion(job)
        assert outcome.reason == "cancelled"


async def test_a_member_that_subscribes_to_events_observes_every_partition(boards: Opener) -> None:
    with anyio.fail_after(30):
        a, b = await two_members(boards)
        async with a.events() as stream:
            await until(lambda: fleet(a).current == frozenset(range(K)))
            job = await post_into(b, b)
            event = await anext(stream)
            while event.job_id != job.id:
                event = await anext(stream)
            assert event.kind is EventKind.POSTED


async def test_a_member_whose_session_expired_joins_again(zk_hosts: str) -> None:
    host, port = zk_hosts.rsplit(":", 1)
    root = f"/partitions/{uuid.uuid4().hex}"
    async with TcpProxy(host, int(port)) as proxy:
        with anyio.fail_after(45):
            async with open_board(f"zookeeper://{proxy.hosts}{root}?partitions={K}&session_timeout=2") as a, \
                    open_board(f"zookeeper://{zk_hosts}{root}?session_timeout=2") as b:
                assert isinstance(a.backend, ZooKeeperBackend) and isinstance(b.backend, ZooKeeperBackend)
                assert await a.claim_next("a") is None and await b.claim_next("b") is None
                await until(lambda: len(fleet(b).owned) == K // 2)
                proxy.pause()  # a's session expires: b owns everything
                await until(lambda: fleet(b).current == frozenset(range(K)), 20)
                job = await b.post("j")
                proxy.resume()  # a starts a new session, registers again, and the partitions split again
                await until(lambda: len(fleet(a).owned) == K // 2 and len(fleet(b).owned) == K // 2, 20)
                assert fleet(a).owned | fleet(b).owned == set(range(K))
                claims = [await board.claim_next(name) for board, name in ((a, "a"), (b, "b"))]
                assert [claim.job.id for claim in claims if claim is not None] == [job.id]
