"""The board's figures (``read_stats``) and its live view (``LiveBoard``), on every in-tree backend."""

from __future__ import annotations

import json
import time
import uuid

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.events import Event, EventKind
from jobboard.board.registry import open_board
from jobboard.errors import BackendUnavailable
from jobboard.job import Entity, JobState
from jobboard.observe.live import LiveBoard, read_stats
from jobboard.observe.stats import BoardStats
from jobboard_memory import MemoryBackend
from jobboard_memory.board import MemoryBoard
from tests.support.boards import BACKENDS, fresh_board_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "live")


async def busy_board(board: JobBoard) -> dict[str, str]:
    """Two names, three priorities, a claim by a registered worker, a waiting job, a trashed job."""
    await board.register_entity("w1", {"pid": 1})
    old = await board.post("resize", {"n": 1}, priority="low")
    await anyio.sleep(0.05)
    taken = await board.post("resize", {"n": 2}, priority="high")
    after = await board.post("notify", depends_on=[old])
    gone = await board.post("notify")
    await board.claim(taken, "w1")
    await board.cancel(gone, "not wanted")
    return {"old": old.id, "taken": taken.id, "after": after.id}


def check_busy(stats: BoardStats, ids: dict[str, str], posted_at: float) -> None:
    assert stats.by_state == {"unclaimed": 1, "claimed": 1, "waiting": 1}
    assert stats.by_name == {"resize": {"unclaimed": 1, "claimed": 1}, "notify": {"waiting": 1}}
    assert stats.by_priority == {"low": 1, "high": 1, "normal": 1}
    assert stats.trash_size == 1 and stats.total == 3
    assert stats.oldest_unclaimed_age is not None
    assert 0 <= stats.oldest_unclaimed_age <= time.time() - posted_at + 1
    [worker] = stats.workers
    assert (worker.name, dict(worker.metadata)) == ("w1", {"pid": 1})
    assert [(job, name) for job, name, _ in worker.running] == [(ids["taken"], "resize")]
    json.dumps(stats.to_json(), allow_nan=False)


async def test_read_stats_counts_the_board(board_url: str) -> None:
    with anyio.fail_after(20):
        async with open_board(board_url) as board:
            posted_at = time.time()
            ids = await busy_board(board)
            check_busy(await read_stats(board), ids, posted_at)


async def test_the_live_view_follows_another_board(board_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url) as board, open_board(board_url) as watcher, \
                LiveBoard(watcher, entity_refresh=0.1) as view:
            posted_at = time.time()
            ids = await busy_board(board)
            await until(view, lambda: len(view.jobs()) == 3 and view.stats().trash_size == 1
                        and bool(view.stats().workers) and view.stats().workers[0].running != ())
            check_busy(view.stats(), ids, posted_at)
            assert [item.job.id for item in view.jobs()] == [ids["taken"], ids["after"], ids["old"]]
            claimed = view.job(ids["taken"])
            assert claimed is not None and (claimed.state, claimed.owner) == (JobState.CLAIMED, "w1")
            claim = await board.claim(ids["old"], "w1")
            await board.consume(claim)  # the waiting job becomes claimable
            await until(view, lambda: view.stats().by_state == {"unclaimed": 1, "claimed": 1, "waiting": 0})
            assert sum(consumed for _, _, consumed, _ in view.throughput()) == 1
            assert sum(posted for _, posted, _, _ in view.throughput()) == 4
            assert view.healthy


async def until(view: LiveBoard, condition: object) -> None:
    """Wait (on the view's changes) until ``condition()`` holds."""
    assert callable(condition)
    version = view.version
    while not condition():
        with anyio.move_on_after(0.2):  # entities and the trash are re-read without an event
            version = await view.changed(version)


async def test_readers_share_one_board_subscription() -> None:
    with anyio.fail_after(10):
        async with open_board(f"memory://live-{uuid.uuid4().hex}") as board:
            assert isinstance(board.backend, MemoryBackend)
            async with LiveBoard(board) as view:
                subscriptions = len(board.hub._streams)
                first, second = view.updates(), view.updates()
                job = await board.post("x")
                assert (await anext(first)).job_id == job.id == (await anext(second)).job_id
                assert len(board.hub._streams) == subscriptions == 1


class FlakyEntitiesBoard(MemoryBoard):
    """A memory board whose ``entities()`` fails while ``down`` is set."""

    down = False

    async def entities(self) -> list[Entity]:
        if self.down:
            raise BackendUnavailable("the test took the backend down")
        return await super().entities()


async def test_the_view_says_when_the_board_is_unreachable_and_recovers() -> None:
    with anyio.fail_after(10):
        async with FlakyEntitiesBoard(f"memory://live-{uuid.uuid4().hex}") as board, \
                LiveBoard(board, entity_refresh=0.05) as view:
            assert view.healthy
            board.down = True
            await until(view, lambda: not view.healthy)
            board.down = False
            await board.register_entity("back", {})
            await until(view, lambda: view.healthy and [w.name for w in view.stats().workers] == ["back"])


async def test_a_dropped_event_makes_the_view_list_the_board_again() -> None:
    with anyio.fail_after(10):
        async with open_board(f"memory://live-{uuid.uuid4().hex}") as board:
            assert isinstance(board.backend, MemoryBackend)
            async with LiveBoard(board, fetch_interval=3600) as view:  # only a listing can read the job
                stream = view.updates()
                hidden = await board.post("hidden")
                assert (await anext(stream)).kind is EventKind.POSTED
                assert view.jobs() == []  # its fields are not read yet
                view._entries.clear()  # as if the view had missed the post
                board.hub.publish(Event(EventKind.DROPPED, count=1))
                assert (await anext(stream)).kind is EventKind.DROPPED
                assert [item.job.id for item in view.jobs()] == [hidden.id]



async def test_readers_are_told_when_the_entities_change() -> None:
    """Entities (and the trash size) are re-read, not sent as events: a change must still move the
    version, or a reader waiting on changed() (a dashboard page) never shows it."""
    with anyio.fail_after(10):
        async with open_board(f"memory://live-{uuid.uuid4().hex}") as board, \
                LiveBoard(board, entity_refresh=0.05) as view:
            version = view.version
            await board.register_entity("late", {})
            version = await view.changed(version)  # nothing else happens on this board
            assert [w.name for w in view.stats().workers] == ["late"]
            await board.unregister_entity("late")
            await view.changed(version)
            assert view.stats().workers == ()


async def test_records_of_plans_and_schedules_are_counted_apart(board_url: str) -> None:
    """A plan's record waits unclaimed for as long as the plan: as a job, it would be the oldest
    unclaimed one for ever (an alert on that age would never clear)."""
    from jobboard.plans.dag import Plan
    from jobboard.plans.posting import post_plan

    plan = Plan("two")
    first = plan.task("resize", 1)
    plan.task("notify", after=[first])
    with anyio.fail_after(20):
        async with open_board(board_url) as board:
            await post_plan(board, plan)
            stats = await read_stats(board)
    assert stats.records >= 1
    assert stats.by_state == {"unclaimed": 1, "claimed": 0, "waiting": 1}
    assert sorted(stats.by_name) == ["notify", "resize"]
    assert stats.total == 2 and stats.to_json()["records"] == stats.records
