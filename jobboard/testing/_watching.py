"""Conformance: wait, wait_for_completion, events, entities, malformed entries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.events import Event, EventKind, EventStream
from jobboard.errors import BoardClosed, InvalidJob
from jobboard.job import Job, JobState
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded, listed_ids


async def next_for(stream: EventStream, job_id: str) -> Event:
    """The next event about ``job_id`` (other jobs' events are skipped)."""
    async for event in stream:
        if event.job_id == job_id:
            return event
    raise AssertionError("event stream ended")


async def wait_blocks(board: JobBoard) -> None:
    """Return once ``board.wait()`` finds nothing claimable: a call stays blocked for 0.2 s.

    Another board's claim may reach a board's view a moment late (``wait()`` is a hint: a worker
    claims with ``claim_next`` after it), so a call that returns early is made again, for 5 s at most.
    """
    for _ in range(25):
        with anyio.move_on_after(0.2) as blocked:
            await board.wait()
        if blocked.cancelled_caught:
            return
    raise AssertionError("wait() kept returning while another board held the only job's claim")


async def found_after(waiter: JobBoard, act: Callable[[], Awaitable[object]]) -> list[str]:
    """The ids ``waiter.wait()``, called while it finds nothing, returns when ``act`` runs."""
    await wait_blocks(waiter)
    found: list[str] = []

    async def wait() -> None:
        found.extend(job.id for job in await waiter.wait())

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.sleep(0.2)
        assert found == [], "wait() returned while nothing was claimable"
        await act()
    return found


async def failures_at_close(board: JobBoard, job: Job) -> list[type[BaseException] | None]:
    """What ``board.wait()`` and ``board.wait_for_completion(job)``, both waiting, raise when ``board``
    closes (``None`` for a call that returned)."""
    failures: list[type[BaseException] | None] = []

    async def wait_on(call: Callable[[], Awaitable[object]]) -> None:
        try:
            await call()
            failures.append(None)
        except BoardClosed as error:
            failures.append(type(error))

    async with anyio.create_task_group() as group:
        group.start_soon(wait_on, board.wait)
        group.start_soon(wait_on, lambda: board.wait_for_completion(job))
        await anyio.sleep(0.2)
        assert failures == [], "a waiter returned before the close"
        await board.aclose()
    return failures


class WatchingConformance(ConformanceBase):
    @bounded
    async def test_wait_returns_claimable_jobs(self, board: JobBoard) -> None:
        job = await board.post("a")
        assert [j.id for j in await board.wait()] == [job.id]

    @bounded
    async def test_wait_is_woken_by_another_boards_post(self, open_boards: BoardOpener) -> None:
        waiter, poster = await open_boards(), await open_boards()
        posted: list[Job] = []

        async def post() -> None:
            posted.append(await poster.post("a"))

        found = await found_after(waiter, post)
        assert found == [posted[0].id]

    @bounded
    async def test_wait_is_woken_by_an_abandon_and_by_the_owners_board_closing(
        self, open_boards: BoardOpener,
    ) -> None:
        waiter, owner = await open_boards(), await open_boards()
        job = await owner.post("a")
        claim = await owner.claim(job, "w1")
        assert await found_after(waiter, lambda: owner.abandon(claim)) == [job.id]
        await owner.claim(job, "w1")
        assert await found_after(waiter, owner.aclose) == [job.id]

    @bounded
    async def test_wait_ignores_claimed_jobs_until_abandoned(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        with anyio.move_on_after(0.3) as scope:
            await board.wait()
        assert scope.cancelled_caught
        await board.abandon(claim)
        assert [j.id for j in await board.wait()] == [claim.job.id]

    @bounded
    async def test_wait_wakes_when_a_delay_ends(self, board: JobBoard) -> None:
        job = await board.post("a")
        await board.abandon(await board.claim(job, "w1"), retry_after=self.delay_unit)
        started = anyio.current_time()
        assert [j.id for j in await board.wait()] == [job.id]
        assert anyio.current_time() - started >= self.delay_unit * 0.8

    @bounded
    async def test_waiters_see_their_board_close(self, open_boards: BoardOpener) -> None:
        board = await open_boards()
        job = await board.post("a")
        await board.claim(job, "w1")  # the close releases it: a change every waiter sees
        assert await failures_at_close(board, job) == [BoardClosed, BoardClosed]

    @bounded
    async def test_waiters_see_their_board_close_when_it_holds_no_claim(self, open_boards: BoardOpener) -> None:
        board, worker = await open_boards(), await open_boards()
        job = await board.post("a")
        await worker.claim(job, "w1")  # the close changes nothing on the board: only the close wakes them
        await wait_blocks(board)
        assert await failures_at_close(board, job) == [BoardClosed, BoardClosed]
        assert await worker.owner(job) == "w1"

    @bounded
    async def test_wait_for_completion_returns_the_result(self, open_boards: BoardOpener) -> None:
        board, worker = await open_boards(), await open_boards()
        job = await board.post("a", keep_result=True)
        async with anyio.create_task_group() as group:
            group.start_soon(_consume_later, worker, {"answer": 42})
            outcome = await board.wait_for_completion(job)
        assert (outcome.job_id, outcome.state, outcome.result) == (job.id, JobState.COMPLETE, {"answer": 42})

    @bounded
    async def test_wait_for_completion_reports_trash(self, board: JobBoard) -> None:
        job = await board.post("a")
        await board.trash(await board.claim(job, "w1"), "no good")
        outcome = await board.wait_for_completion(job)
        assert (outcome.state, outcome.reason) == (JobState.TRASHED, "no good")

    @bounded
    async def test_wait_for_completion_of_a_dependent(self, board: JobBoard) -> None:
        dep = await board.post("dep")
        linked = await board.post("linked", depends_on=[dep], keep_result=True)
        async with anyio.create_task_group() as group:
            group.start_soon(_consume_later, board, None)
            group.start_soon(_consume_later, board, None)
            outcome = await board.wait_for_completion(linked)
        assert (outcome.state, outcome.result) == (JobState.COMPLETE, "linked")

    @bounded
    async def test_events_follow_a_job(self, board: JobBoard) -> None:
        async with board.events() as stream:
            job = await board.post("a")
            claim = await board.claim(job, "w1")
            await board.abandon(claim)
            await board.trash(await board.claim(job, "w2"), "why not")
            kinds = [(await next_for(stream, job.id)).kind for _ in range(5)]
        assert kinds == [EventKind.POSTED, EventKind.CLAIMED, EventKind.RELEASED,
                         EventKind.CLAIMED, EventKind.TRASHED]

    @bounded
    async def test_events_show_other_boards_work(self, open_boards: BoardOpener) -> None:
        watcher, worker = await open_boards(), await open_boards()
        stream = watcher.events()
        job = await worker.post("a")
        await worker.consume(await worker.claim(job, "w1"))
        kinds = [(await next_for(stream, job.id)).kind for _ in range(3)]
        assert kinds == [EventKind.POSTED, EventKind.CLAIMED, EventKind.CONSUMED]

    @bounded
    async def test_slow_reader_loses_oldest_events_and_is_told(self, board: JobBoard) -> None:
        stream = board.events(maxlen=3)
        jobs = [await board.post(f"j{i}") for i in range(10)]
        dropped = await anext(stream)
        assert dropped.kind is EventKind.DROPPED and dropped.count == 7
        rest = [await anext(stream) for _ in range(3)]
        assert [e.job_id for e in rest] == [j.id for j in jobs[-3:]]

    @bounded
    async def test_event_streams_end_when_the_board_closes(self, open_boards: BoardOpener) -> None:
        board = await open_boards()
        stream = board.events()
        await board.aclose()
        assert [event async for event in stream] == []

    @bounded
    async def test_entities_live_while_their_board_is_open(self, open_boards: BoardOpener) -> None:
        worker, observer = await open_boards(), await open_boards()
        await worker.register_entity("worker-1", {"host": "h", "pid": 7})
        entities = await observer.entities()
        assert [(e.name, dict(e.metadata)) for e in entities] == [("worker-1", {"host": "h", "pid": 7})]
        await worker.aclose()
        assert await observer.entities() == []

    @bounded
    async def test_unregistered_entities_are_gone(self, open_boards: BoardOpener) -> None:
        worker, other = await open_boards(), await open_boards()
        await worker.register_entity("w1")
        await worker.register_entity("w2", {"n": 2})
        await other.unregister_entity("w1")  # not its registration: nothing happens
        await worker.unregister_entity("w1")
        assert [(e.name, dict(e.metadata)) for e in await other.entities()] == [("w2", {"n": 2})]

    @bounded
    async def test_entity_with_unencodable_metadata_refused(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob):
            await board.register_entity("w", {"bad": object()})
        assert await board.entities() == []

    @bounded
    async def test_malformed_entry_is_skipped_and_reported(self, board: JobBoard) -> None:
        good = await board.post("good")
        async with board.events() as stream:
            await self.inject_malformed(board)
            assert await listed_ids(board) == [good.id]
            assert await listed_ids(board, only_unclaimed=True) == [good.id]
            event = await anext(stream)
            while event.kind is not EventKind.MALFORMED:
                event = await anext(stream)
        claim = await board.claim_next("w1")
        assert claim is not None and claim.job.id == good.id
        await board.consume(claim)
        assert await board.claim_next("w1") is None


async def _consume_later(board: JobBoard, result: object) -> None:
    """Claim the next job once there is one and consume it with ``result`` (or its name)."""
    while (claim := await board.claim_next("later")) is None:
        await board.wait()
    await anyio.sleep(0.05)
    await board.consume(claim, claim.job.name if result is None else result)
