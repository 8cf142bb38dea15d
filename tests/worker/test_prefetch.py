"""Claim-ahead in the worker (``WorkerConfig.prefetch``, ``jobboard worker --prefetch N``): at most N jobs
held claimed and unstarted, run in the board's order, and given back at once when the worker stops."""

from __future__ import annotations

import contextlib
import inspect
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path

import anyio
import pytest

from jobboard import JobBoard, JobContext, JobState, Priority, open_board
from jobboard.backend import Backend
from jobboard.cli.app import main
from jobboard.errors import Unsupported
from jobboard.job import Claim
from jobboard.worker.ahead import HELD_FRESH
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import as_async
from jobboard_memory import MemoryBackend
from jobboard_redis.board import RedisBackend
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401 (a fixture)
from tests.support.pgserver import postgresql_url  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(60)

HANDLERS = "tests.support.cli_handlers:handlers"
SESSION_TIMEOUT = 30  # far longer than the test waits: a held job back on the board was given back


ALL = ["memory", "sqlite", "postgresql", "redis", "redis-traced", "redis-spread", "zookeeper"]
"""Every backend whose release gives a job back uncounted (``redis-spread``: a board spread over a Redis Cluster's
three masters), and a wrapped board (``--trace``)."""


def board_url(backend: str, redis_url: str) -> str:
    name = f"prefetch-{uuid.uuid4().hex}"
    return f"{redis_url}/0/{name}?session_timeout={SESSION_TIMEOUT}" if backend == "redis" else f"memory://{name}"


@contextlib.asynccontextmanager
async def any_board(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobBoard]:
    """A fresh board on ``backend`` (one of :data:`ALL`; ``-traced``: in a TracedBoard, as ``--trace`` runs)."""
    kind, _, wrapper = backend.partition("-")
    kind = backend if wrapper == "spread" else kind
    name = f"prefetch{uuid.uuid4().hex[:12]}"
    url = {"memory": lambda: f"memory://{name}", "sqlite": lambda: f"sqlite:///{tmp_path}/b.db?board={name}",
           "postgresql": lambda: f"{request.getfixturevalue('postgresql_url')}?board={name}&schema=prefetch",
           "redis": lambda: board_url("redis", request.getfixturevalue("redis_url")),
           "redis-spread": lambda: f"redis://{request.getfixturevalue('cluster_seeds')}/0/{name}?cluster=1&partitions=3"
                                   f"&session_timeout={SESSION_TIMEOUT}",
           "zookeeper": lambda: f"zookeeper://{request.getfixturevalue('zk_hosts')}/prefetch/{name}?session_timeout=4",
           }[kind]()
    async with open_board(url) as board:
        if wrapper != "traced":
            yield board
            return
        from jobboard.observe.tracing import TracedBoard
        yield TracedBoard(board)


async def nothing(ctx: JobContext) -> None:
    """A handler that does nothing."""


async def until(check: Callable[[], Awaitable[object] | object], what: str) -> None:
    """Until ``check()`` is truthy (polled every 10 ms, 20 s at most)."""
    for _ in range(2000):
        answer = check()
        if await answer if inspect.isawaitable(answer) else answer:
            return
        await anyio.sleep(0.01)
    pytest.fail(f"{what} never came")


@contextlib.asynccontextmanager
async def holding_one_ahead(board: JobBoard, handler: Callable[[JobContext], Awaitable[None]]
                            ) -> AsyncIterator[tuple[Worker, Claim]]:
    """A worker (``prefetch`` 1, ``burst``) running ``handler`` on ``board``, with the claim it holds ahead once it
    holds one; the worker's run is awaited at the end."""
    worker = Worker(board, handler, WorkerConfig(prefetch=1, burst=True))
    ahead = worker._ahead
    assert ahead is not None
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await until(lambda: ahead.held, "a job held ahead")
        yield worker, ahead.held[0]


async def claimed_by(board: JobBoard, jobs: list[str]) -> list[str | None]:
    return [await board.owner(job) for job in jobs]


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_worker_holds_at_most_prefetch_jobs_and_runs_them_in_order(backend: str, redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(backend, redis_url)) as board:
            jobs = [(await board.post("echo", {"i": i}, priority=Priority.HIGH if i % 2 else Priority.LOW)).id
                    for i in range(7)]
            ran: list[str] = []
            holding: list[int] = []
            worker: Worker

            async def echo(ctx: JobContext) -> None:
                ran.append(ctx.job.id)
                holding.append(sum(owner is not None for owner in await claimed_by(board, jobs)))

            worker = Worker(board, echo, WorkerConfig(prefetch=2, burst=True, concurrency=1))
            stats = await worker.run()
    assert ran == [jobs[i] for i in (1, 3, 5, 0, 2, 4, 6)]  # priority, then age
    assert max(holding) == 3 and holding[0] == 3  # the running job and 2 ahead, from the first claim call
    assert (stats.claimed, stats.consumed, stats.released) == (7, 7, 0)


@pytest.mark.parametrize("backend", ALL)
async def test_stop_gives_back_the_jobs_held_ahead(backend: str, request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    """Held jobs of ``max_attempts=1`` given back at a stop run later (review A1: an abandon trashed them)."""
    with anyio.fail_after(40):
        async with any_board(backend, request, tmp_path) as board:
            first = await board.post("echo", priority=Priority.HIGH)
            rest = [(await board.post("echo", max_attempts=1)).id for _ in range(4)]
            started = anyio.Event()

            async def hold(ctx: JobContext) -> None:
                started.set()
                await anyio.sleep(60)

            worker = Worker(board, hold, WorkerConfig(prefetch=3, grace_period=0.2))
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await started.wait()
                assert await claimed_by(board, rest) == [worker.owner] * 3 + [None]
                worker.stop()
            assert await board.owner(first) is None  # abandoned at the grace period's end
            assert await claimed_by(board, rest) == [None] * 4
            assert (worker.stats.claimed, worker.stats.abandoned_on_shutdown, worker.stats.released) == (1, 1, 3)
            assert [(await board.get(job)).attempts for job in rest] == [0] * 4
            done = await Worker(board, nothing, WorkerConfig(burst=True)).run()
            assert done.consumed == 5  # max_attempts=1, given back unstarted: not trashed
            assert [await board.state(job) for job in rest] == [JobState.COMPLETE] * 4


def test_sigterm_gives_back_the_jobs_held_ahead_at_once(redis_url: str) -> None:
    """``jobboard worker --prefetch 3``: SIGTERM while one job runs, three held; the three are claimable within
    seconds (not after the session timeout) with their attempt uncounted, and the process exits 0."""

    async def post(url: str) -> tuple[str, list[str]]:
        async with open_board(url) as board:
            first = await board.post("sleep", {"s": 60}, priority=Priority.HIGH)
            return first.id, [(await board.post("echo", max_attempts=1)).id for _ in range(4)]

    async def owners(url: str, jobs: list[str]) -> list[str | None]:
        async with open_board(url) as board:
            return await claimed_by(board, jobs)

    url = board_url("redis", redis_url)
    first, rest = anyio.run(post, url)
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS,
                              "--prefetch", "3", "--grace-period", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while anyio.run(owners, url, [first]) == [None]:
            assert time.monotonic() < deadline and child.poll() is None, "the worker claimed nothing"
            time.sleep(0.05)
        held = anyio.run(owners, url, rest)
        assert held[3] is None and len(set(held[:3])) == 1 and held[0] is not None, held
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert anyio.run(owners, url, [first, *rest]) == [None] * 5

    async def rest_run(url: str) -> list[JobState]:
        async with open_board(url) as board:
            assert [(await board.get(job)).attempts for job in rest] == [0] * 4
            await Worker(board, nothing, WorkerConfig(burst=True)).run()
            return [await board.state(job) for job in rest]

    assert anyio.run(rest_run, url) == [JobState.COMPLETE] * 4


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgresql", "redis", "zookeeper"])
async def test_a_job_cancelled_while_held_ahead_is_not_started(backend: str, request: pytest.FixtureRequest,
                                                               tmp_path: Path) -> None:
    """Review A2: a held job cancelled before its slot frees is dropped, not run (a plain handler in a thread
    would run to its end before the claim watcher's answer). The slot frees :data:`HELD_FRESH` s after the
    cancel: a claim held less than that starts unread, with the race of any claim started at its reply."""
    with anyio.fail_after(30):
        async with any_board(backend, request, tmp_path) as board:
            first = await board.post("x", priority=Priority.HIGH)
            held = await board.post("x")
            go_on = threading.Event()
            ran: list[str] = []

            def handler(ctx: JobContext) -> None:
                ran.append(ctx.job.id)
                if ctx.job.id == first.id:
                    go_on.wait(20)

            worker = Worker(board, as_async(handler), WorkerConfig(prefetch=1, burst=True))
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await until(lambda: board.owner(held), "the job held ahead")
                await board.cancel(held, "not wanted any more")
                await anyio.sleep(HELD_FRESH)
                go_on.set()
    assert ran == [first.id], worker.stats.as_dict()
    assert (worker.stats.claimed, worker.stats.dropped, worker.stats.released) == (1, 1, 0)


async def test_a_job_held_ahead_across_a_lost_session_is_not_started(redis_url: str) -> None:
    """Review A2: the board's session lost while a job is held (its entry expired, as after a stall past the
    session timeout: its claims are anyone's): the held claim of the lost session is dropped, not started."""
    with anyio.fail_after(40):
        async with open_board(f"{redis_url}/0/prefetch-{uuid.uuid4().hex}?session_timeout=2") as board:
            first = await board.post("x", priority=Priority.HIGH)
            held = await board.post("x")
            started: list[tuple[str, int]] = []

            async def handler(ctx: JobContext) -> None:
                started.append((ctx.job.id, ctx.claim.generation))
                if ctx.job.id == first.id and len(started) == 1:
                    await anyio.sleep(30)

            async with holding_one_ahead(board, handler) as (worker, stale):
                assert stale.job.id == held.id
                backend = board.backend
                assert isinstance(backend, RedisBackend)
                await backend.client.command("ZADD", backend.options.prefix + "sessions", 0, backend.session.id)
    assert (held.id, stale.generation) not in started, (started, worker.stats.as_dict())
    assert worker.stats.dropped == 1 and held.id in {job for job, _ in started}  # run under its new claim


def test_prefetch_is_refused_where_release_counts_an_attempt(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A board whose release is the interface's abandon (a third-party backend, the spread board): the worker
    refuses prefetch at once (Unsupported), the CLI with exit 2 and one line naming the backend."""
    monkeypatch.setattr(MemoryBackend, "release", Backend.release)

    async def refused() -> None:
        async with open_board(f"memory://prefetch-{uuid.uuid4().hex}") as board:
            assert not board.releases_uncounted
            with pytest.raises(Unsupported, match="MemoryBackend"):
                Worker(board, nothing, WorkerConfig(prefetch=2))
            assert Worker(board, nothing, WorkerConfig(prefetch=0)).config.prefetch == 0

    anyio.run(refused)
    assert main(["worker", f"memory://p-{uuid.uuid4().hex}", "--handlers", HANDLERS, "--prefetch", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prefetch 2" in err[0] and "MemoryBackend" in err[0], err


async def test_a_claim_many_cancelled_during_a_set_aside_keeps_no_claim(redis_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review A7: redis:// ``claim_many`` reads its claims one by one, awaiting a malformed one's set-aside; a
    cancel landing there lost the claims made after it (held by the board, neither returned nor given back)."""
    with anyio.fail_after(20):
        async with open_board(board_url("redis", redis_url)) as board:
            backend = board.backend
            assert isinstance(backend, RedisBackend)
            prefix = backend.options.prefix
            await backend.client.command("HSET", f"{prefix}job:999999", "p", b"\x93written by another tool",
                                         "name", "x", "sc", "1", "st", "u", "gen", "0", "att", "0")
            for index in ("all", "ready", "rn:x"):
                await backend.client.command("ZADD", f"{prefix}{index}", "1", "999999")
            jobs = [(await board.post("x")).id for _ in range(2)]
            set_aside, claims = backend._set_aside, []
            with anyio.CancelScope() as scope:

                async def cancelled_meanwhile(job: str) -> None:  # the caller's cancel, landing in the set-aside
                    scope.cancel()
                    await set_aside(job)

                monkeypatch.setattr(backend, "_set_aside", cancelled_meanwhile)
                claims = await board.claim_many("w", 3)
            monkeypatch.undo()
            for claim in claims:  # returned to the caller: its to give back
                await board.release(claim)
            assert await claimed_by(board, jobs) == [None, None], "claims made, neither returned nor given back"


class SlowClaimReplies(MemoryBackend):
    """memory:// whose ``claim_many`` replies take 0.3 s, as a round trip under load would."""

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        claims = await super().claim_many(owner, names, count)
        await anyio.sleep(0.3)
        return claims


async def test_a_claimer_waiting_for_a_call_in_flight_at_the_stop_starts_none_of_its_held_jobs() -> None:
    """Concurrency 2, prefetch 2: one claimer's call in flight, the other waiting for it, when the worker stops.
    The call's own job runs (a claim made is not lost to a stop); the two held ones are given back, not started
    (found by a review: the waiting claimer took a held one after the stop and ran it)."""
    started_after_stop: list[str] = []

    async def handler(ctx: JobContext) -> None:
        if worker.stats.claimed and stopped:
            started_after_stop.append(ctx.job.id)

    stopped = False
    async with JobBoard(SlowClaimReplies(f"memory://{uuid.uuid4().hex}")) as board:
        for _ in range(3):
            await board.post("x")
        worker = Worker(board, handler, WorkerConfig(prefetch=2, concurrency=2))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await worker.started.wait()
                await anyio.sleep(0.1)
                stopped = True
                worker.stop()
        assert await board.job_count() == 2
    assert (worker.stats.claimed, worker.stats.released) == (1, 2), worker.stats
    assert len(started_after_stop) == 1, started_after_stop  # the call's own job only
