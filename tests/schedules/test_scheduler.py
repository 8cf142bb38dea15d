"""Periodic jobs: schedules stored on the board, racing schedulers, catch-up, outages, the worker option."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import anyio
import pytest

from jobboard import open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import InvalidJob
from jobboard.job import Job, JobState
from jobboard.schedules.schedule import RECORD, Schedule
from jobboard.schedules.scheduler import Scheduler, add_schedule, list_schedules, remove_schedule
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import JobContext
from tests.support.boards import BACKENDS, fresh_board_url
from tests.support.tcpproxy import TcpProxy

EVERY = 0.02
"""The period of the racing tests: 20 ms."""


@pytest.fixture(params=BACKENDS)
def board_url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "schedule")


async def jobs_named(board: JobBoard, name: str) -> list[Job]:
    return [job async for job in board.iterjobs() if job.name == name]


async def posted_since(board: JobBoard, name: str, since: float) -> list[Job]:
    return [job for job in await jobs_named(board, name) if job.created_at >= since]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_five_schedulers_racing_for_100_periods_post_exactly_100_jobs(board_url: str) -> None:
    start = 1_000_000 * EVERY  # a round period index, so that the keys are predictable
    clock = FakeClock(start)
    with anyio.fail_after(90):
        async with open_board(board_url) as setup:
            await add_schedule(setup, Schedule("race", "tick", every=EVERY, catch_up="once"))
        boards = [await open_board(board_url).__aenter__() for _ in range(5)]
        try:
            schedulers = [Scheduler(board, clock=clock) for board in boards]
            for scheduler in schedulers:
                assert [s.name for s in await scheduler.reload()] == ["race"]
            for period in range(100):
                clock.now = start + period * EVERY + EVERY / 4
                async with anyio.create_task_group() as group:
                    for scheduler in schedulers:
                        group.start_soon(scheduler.tick)
            posted = await jobs_named(boards[0], "tick")
        finally:
            for board in boards:
                await board.aclose()
    keys = Counter(job.key for job in posted)
    assert sum(s.posts for s in schedulers) == 500  # every scheduler tried every period ...
    assert len(posted) == 100 and len(keys) == 100  # ... and each period was posted once
    assert set(keys) == {f"{RECORD}:race:{1_000_000 + period}" for period in range(100)}


async def test_schedulers_running_for_real_post_each_period_once(board_url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(board_url) as setup:
            await add_schedule(setup, Schedule("live", "tick", every=0.05, catch_up="once"))
            async with anyio.create_task_group() as group:
                boards = [await open_board(board_url).__aenter__() for _ in range(5)]
                schedulers = [Scheduler(board) for board in boards]
                for scheduler in schedulers:
                    group.start_soon(scheduler.run)
                await anyio.sleep(1.5)
                group.cancel_scope.cancel()
            for board in boards:
                await board.aclose()
            posted = await jobs_named(setup, "tick")
    periods = sorted(int(str(job.key).rsplit(":", 1)[1]) for job in posted)
    assert len(periods) == len(set(periods)), "a period was posted twice"
    assert len(periods) >= 10  # about 30 periods in 1.5 s; most of them, even on a loaded machine


@pytest.mark.parametrize("catch_up", ["skip", "once"])
async def test_missed_periods_follow_the_catch_up_policy(catch_up: str) -> None:
    clock = FakeClock(1000.0)
    with anyio.fail_after(10):
        async with open_board(f"memory://catch-up-{uuid.uuid4().hex}") as board:
            await add_schedule(board, Schedule("nightly", "report", every=10, catch_up=catch_up))
            scheduler = Scheduler(board, clock=clock)
            await scheduler.reload()
            for now in (1000.5, 1004.0, 1010.2, 1067.0, 1070.1, 1071.0):  # down from 1011 to 1067
                clock.now = now
                await scheduler.tick()
            periods = sorted(int(str(job.key).rsplit(":", 1)[1]) for job in await jobs_named(board, "report"))
    # 100, 101 on time; 102..106 missed: skip drops them (106 is 7 s late, grace 5 s), once runs 106; 107
    assert periods == ([100, 101, 107] if catch_up == "skip" else [100, 101, 106, 107])


def test_periods_are_never_posted_later_than_the_key_retention() -> None:
    schedule = Schedule("weekly", "report", every=7 * 86400, catch_up="once")
    assert schedule.due(7 * 86400 + 3600, retention=86400) == 7 * 86400
    assert schedule.due(7 * 86400 + 86000, retention=86400) is None  # a second post might not find the first


async def test_schedules_are_stored_on_the_board_for_every_process(board_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url) as one, open_board(board_url) as other:
            await add_schedule(one, Schedule("a", "job-a", every=60))
            await add_schedule(one, Schedule("b", "job-b", every=5, details={"x": 1}, catch_up="once"))
            await one.post("ordinary")
            assert [(s.name, s.job, s.every) for s in await list_schedules(other)] == [
                ("a", "job-a", 60), ("b", "job-b", 5)]
            await add_schedule(other, Schedule("a", "job-a2", every=30))  # replaces a
            assert [(s.name, s.job) for s in await list_schedules(one)] == [("a", "job-a2"), ("b", "job-b")]
            records = await jobs_named(one, RECORD)
            assert len(records) == 2 and [await one.state(r) for r in records] == [JobState.UNCLAIMED] * 2
            assert await one.claim_next("w") is not None  # the ordinary job; records are internal
            assert await one.claim_next("w") is None
            assert await remove_schedule(other, "a") == 1
            assert await remove_schedule(other, "a") == 0
            assert [s.name for s in await list_schedules(one)] == ["b"]


async def test_a_too_short_key_retention_is_refused() -> None:
    async with open_board("memory://?key_retention=1") as board:
        with pytest.raises(InvalidJob, match="key_retention"):
            await add_schedule(board, Schedule("a", "job", every=60))


@pytest.mark.parametrize("bad", [
    {"every": 0}, {"every": -1}, {"every": 1, "cron": "* * * * *"}, {}, {"cron": "61 * * * *"},
    {"cron": "* * *"}, {"every": 1, "catch_up": "all"}, {"every": 1, "grace": 0},
    {"every": 1, "name": "bad name"}, {"every": 1, "name": ""}, {"every": 1, "job": ""},
])
def test_bad_schedules_are_refused(bad: dict[str, object]) -> None:
    options = {"name": "s", "job": "j", **bad}
    with pytest.raises(InvalidJob) as caught:
        Schedule(**options)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_cron_periods() -> None:
    schedule = Schedule("c", "j", cron="*/5 * * * *")
    at, following = schedule.latest(1_800_000_000 + 1)  # 2027-01-15T08:00:01Z
    assert (at, following) == (1_800_000_000, 1_800_000_300)
    assert schedule.latest(1_800_000_000) == (1_800_000_000, 1_800_000_300)
    assert schedule.period_key(at) == f"{RECORD}:c:1800000000"
    assert schedule.due(1_800_000_000 + 100, retention=86400) is None  # grace: 60 s
    assert Schedule("c", "j", cron="*/5 * * * *", catch_up="once").due(1_800_000_100, 86400) == 1_800_000_000


async def test_a_scheduler_survives_an_outage(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    host, port = redis_url.removeprefix("redis://").rsplit(":", 1)
    root = f"outage-{uuid.uuid4().hex}"
    async with TcpProxy(host, int(port)) as proxy:
        url = f"redis://{proxy.hosts}/0/{root}?session_timeout=1"
        with anyio.fail_after(60):
            async with open_board(url) as board:
                await add_schedule(board, Schedule("beat", "tick", every=0.1, catch_up="once"))
                scheduler = Scheduler(board, refresh=0.2)
                async with anyio.create_task_group() as group:
                    group.start_soon(scheduler.run)
                    await anyio.sleep(0.5)
                    proxy.pause()  # new connections are held ...
                    proxy.drop()  # ... and the current ones reset
                    await anyio.sleep(2.5)
                    proxy.resume()
                    resumed = time.time()
                    # its next try comes within its back-off (0.2, 0.4, 0.8, 1.6 s ... over the outage: a fixed
                    # 1.5 s may miss a 1.6-s one), the try itself on a loaded machine: waited for, up to 15 s
                    with anyio.move_on_after(15):
                        while not await posted_since(board, "tick", resumed):  # noqa: ASYNC110
                            await anyio.sleep(0.2)
                    group.cancel_scope.cancel()
                posted = await jobs_named(board, "tick")
    after = [job for job in posted if job.created_at >= resumed]
    assert after, "the scheduler posted nothing after the outage"
    print(f"the first tick {min(job.created_at for job in after) - resumed:.2f} s after the outage")
    assert any("scheduler:" in record.getMessage() for record in caplog.records), "no error was met"
    assert len({job.key for job in posted}) == len(posted)


async def test_a_worker_with_the_scheduler_option_runs_periodic_jobs(board_url: str) -> None:
    done: list[str | None] = []

    async def tick(ctx: JobContext) -> None:
        done.append(ctx.claim.job.key)

    with anyio.fail_after(30):
        async with open_board(board_url) as board:
            await add_schedule(board, Schedule("beat", "tick", every=0.2, catch_up="once"))
            workers = [Worker(board, tick, WorkerConfig(owner=f"w{n}", scheduler=True), names=["tick"])
                       for n in range(2)]
            async with anyio.create_task_group() as group:
                for worker in workers:
                    group.start_soon(worker.run)
                await anyio.sleep(1.5)
                for worker in workers:
                    worker.stop()
    assert len(done) >= 3 and len(done) == len(set(done))
