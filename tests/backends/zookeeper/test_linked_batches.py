"""zookeeper:// ``post_many`` of linked postings: a run of them is one multi (its dependencies located
first), and falls back to one post at a time when a dependency is missing or moved, so that
``DependencyMissing`` names the same index and the same posted jobs as posting them one by one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import JobBoard, JobState, NewJob, open_board
from jobboard.errors import DependencyMissing
from jobboard_zookeeper import ZooKeeperBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def board(zk_hosts: str) -> AsyncIterator[JobBoard]:
    async with open_board(f"zookeeper://{zk_hosts}/linked-batches/{uuid.uuid4().hex}") as opened:
        yield opened


def backend(board: JobBoard) -> ZooKeeperBackend:
    assert isinstance(board.backend, ZooKeeperBackend)
    return board.backend


async def test_a_run_of_linked_postings_is_a_few_requests_and_their_results_arrive(board: JobBoard) -> None:
    with anyio.fail_after(30):
        parents = await board.post_many([NewJob("parent", {"i": i}) for i in range(3)])
        sent = backend(board).zk.requests_sent
        children = await board.post_many([NewJob("child", {"i": i}, depends_on=parents[i % 3:] or parents)
                                          for i in range(100)])
        assert backend(board).zk.requests_sent - sent < 50  # 3 dependencies located, one multi (one by one: > 600)
        assert [job.details["i"] for job in children] == list(range(100))
        assert {await board.state(job) for job in children} == {JobState.WAITING}
        for index, parent in enumerate(parents):
            await board.consume(await board.claim(parent, "w1"), f"r{index}")
        assert {await board.state(job) for job in children} == {JobState.UNCLAIMED}
        claim = await board.claim(children[1], "w1")
        assert claim.dependency_results == ("r1", "r2")
        assert [job.id async for job in board.iterjobs()] == [job.id for job in children]


async def test_a_missing_dependency_in_a_run_keeps_the_jobs_before_it_and_writes_none_after(board: JobBoard) -> None:
    with anyio.fail_after(30):
        parent, gone = await board.post("parent"), await board.post("gone")
        await board.consume(await board.claim(gone, "w1"))
        batch = [NewJob("u"), NewJob("x", depends_on=[parent]), NewJob("y", depends_on=[parent]),
                 NewJob("bad", depends_on=[parent, gone]), NewJob("z", depends_on=[parent]), NewJob("after")]
        with pytest.raises(DependencyMissing, match=r"jobs\[3\]: .* not on the board") as raised:
            await board.post_many(batch)
        assert raised.value.index == 3
        assert [job.name for job in raised.value.posted] == ["u", "x", "y"]
        assert sorted([job.id async for job in board.iterjobs()]) == sorted(
            [parent.id, *(job.id for job in raised.value.posted)])


async def test_a_dependency_that_moved_after_it_was_located_falls_back_to_single_posts(
        board: JobBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    with anyio.fail_after(30):
        parent = await board.post("parent")
        poster = backend(board)._poster
        located = poster.locate

        async def stale(job: str) -> str | None:  # as if the job had been waiting when the batch located it
            monkeypatch.setattr(poster, "locate", located)  # the single posts after it locate it anew
            found = await located(job)
            return backend(board)._paths.waiting(job) if found is not None else None

        monkeypatch.setattr(poster, "locate", stale)
        jobs = await board.post_many([NewJob("k", key="once"), NewJob("c1", depends_on=[parent], key="c1"),
                                      NewJob("c2", depends_on=[parent])])
        again = await board.post_many([NewJob("c1", depends_on=[parent], key="c1")])  # the key finds it
        assert [job.id for job in again] == [jobs[1].id]
        assert [await board.state(job) for job in jobs] == [JobState.UNCLAIMED, JobState.WAITING, JobState.WAITING]
        await board.consume(await board.claim(parent, "w1"), "done")
        assert [(await board.claim(job, "w1")).dependency_results for job in jobs[1:]] == [("done",), ("done",)]
