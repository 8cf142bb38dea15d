"""The PostgreSQL queues beside postgresql:// in ``benchmarks.postgresql_peers``, each through its public API.

Every system gives three coroutines, all on the server at ``url``, each in a fresh queue:

- ``cycle(url, jobs, workers)``: its bulk post of ``jobs`` (timed, batches of 1,000; ``None`` where it
  has no bulk API), then its worker with ``workers`` concurrent jobs runs them all (timed);
- ``posts(url, count, posters)``: ``posters`` tasks enqueueing one job at a time;
- ``wake(url, samples)``: ms from an enqueue to the job running in an idle worker (median).

Installs: ``pip install pgqueuer==1.6.0 procrastinate==3.10.0 'saq[postgres]==0.26.4'`` (not in
jobboard's dependencies). oban-py (``oban`` on PyPI) needs Python >= 3.12: it is not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

Result = dict[str, float | None]
BATCH = 1000


async def timed_posts(post: Callable[[int], Awaitable[Any]], count: int, posters: int) -> float:
    """``count`` posts by ``posters`` tasks, one at a time each: posts per second."""
    left = iter(range(count))

    async def poster() -> None:
        for n in left:
            await post(n)

    started = time.perf_counter()
    await asyncio.gather(*(poster() for _ in range(posters)))
    return count / (time.perf_counter() - started)


async def wake_latency(enqueue: Callable[[], Awaitable[Any]], ran: asyncio.Event, samples: int) -> float:
    """Median ms from ``enqueue()`` to ``ran`` set by the running job (the worker idle before each)."""
    latencies = []
    await asyncio.sleep(0.3)
    for _ in range(samples):
        await asyncio.sleep(0.05)
        ran.clear()
        started = time.perf_counter()
        await enqueue()
        await asyncio.wait_for(ran.wait(), 10)
        latencies.append(time.perf_counter() - started)
    return statistics.median(latencies) * 1000


async def bounded(work: Awaitable[Any], seconds: float, cancel: bool = True) -> None:
    """Wait at most ``seconds`` for ``work`` (a task or a coroutine, cancelled first when ``cancel``), then at most
    5 s more for its cancellation; a task that still will not end is left behind (``asyncio.wait_for`` would
    wait for it forever: SAQ's worker shutdown did), and so is any error it raised."""
    task = asyncio.ensure_future(work)
    if cancel:
        task.cancel()
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: not logged as never retrieved


async def stopped(task: asyncio.Task[Any]) -> None:
    await bounded(task, 5)


# -- pgqueuer (asyncpg): Queries.enqueue with lists is its bulk path; QueueManager runs the jobs ----------

async def _pgqueuer_ready(url: str) -> Any:
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(connection))
    if not await connection.fetchval("SELECT to_regclass('pgqueuer') IS NOT NULL"):
        await queries.install()
    await connection.execute("TRUNCATE pgqueuer")
    return connection, queries


def _pgqueuer_manager(queries: Any, ran: Callable[[], None]) -> Any:
    from pgqueuer import Job, QueueManager

    manager = QueueManager(queries)

    @manager.entrypoint("cycle")
    async def cycle(job: Job) -> None:
        ran()

    return manager


async def pgqueuer_cycle(url: str, jobs: int, workers: int) -> Result:
    from pgqueuer.types import QueueExecutionMode

    connection, queries = await _pgqueuer_ready(url)
    try:
        started = time.perf_counter()
        for start in range(0, jobs, BATCH):
            count = min(jobs, start + BATCH) - start
            await queries.enqueue(["cycle"] * count, [None] * count, [0] * count)
        posts = jobs / (time.perf_counter() - started)
        manager = _pgqueuer_manager(queries, lambda: None)
        batch = max(1, workers // 2)  # it wants at least twice the batch in flight
        started = time.perf_counter()
        await manager.run(mode=QueueExecutionMode.drain, batch_size=batch, max_concurrent_tasks=max(workers, 2 * batch))
        return {"post_many_per_s": posts, "cycles_per_s": jobs / (time.perf_counter() - started)}
    finally:
        await connection.close()


async def pgqueuer_posts(url: str, count: int, posters: int) -> float:
    from pgqueuer import Queries
    from pgqueuer.db import AsyncpgPoolDriver

    connection, _ = await _pgqueuer_ready(url)
    await connection.close()
    pool = await asyncpg.create_pool(url, min_size=posters, max_size=posters)
    try:
        queries = Queries(AsyncpgPoolDriver(pool))
        return await timed_posts(lambda n: queries.enqueue("cycle", None), count, posters)
    finally:
        await pool.close()


async def pgqueuer_wake(url: str, samples: int) -> float:
    connection, queries = await _pgqueuer_ready(url)
    ran = asyncio.Event()
    worker_connection = await asyncpg.connect(url)
    from pgqueuer import AsyncpgDriver, Queries

    manager = _pgqueuer_manager(Queries(AsyncpgDriver(worker_connection)), ran.set)
    task = asyncio.ensure_future(manager.run(batch_size=1, max_concurrent_tasks=2))
    try:
        return await wake_latency(lambda: queries.enqueue("cycle", None), ran, samples)
    finally:
        manager.shutdown.set()
        await bounded(task, 5, cancel=False)
        await worker_connection.close()
        await connection.close()


# -- procrastinate (psycopg 3): batch_defer_async is its bulk path; run_worker_async runs the jobs ---------

@contextlib.asynccontextmanager
async def _procrastinate(url: str, ran: Callable[[], None], pool: int = 20) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, min_size=2, max_size=pool))

    @app.task(name="cycle")
    async def cycle(n: int) -> None:
        ran()

    async with app.open_async():
        async with app.connector.pool.connection() as connection:  # type: ignore[attr-defined]
            installed = await (await connection.execute("SELECT to_regclass('procrastinate_jobs')")).fetchone()
        if installed[0] is None:
            await app.schema_manager.apply_schema_async()
        queue = f"q{uuid.uuid4().hex[:8]}"
        yield app, queue, cycle.configure(queue=queue)


async def procrastinate_cycle(url: str, jobs: int, workers: int) -> Result:
    async with _procrastinate(url, lambda: None) as (app, queue, deferrer):
        started = time.perf_counter()
        for start in range(0, jobs, BATCH):
            await deferrer.batch_defer_async(*({"n": n} for n in range(start, min(jobs, start + BATCH))))
        posts = jobs / (time.perf_counter() - started)
        started = time.perf_counter()
        await app.run_worker_async(queues=[queue], concurrency=workers, wait=False)
        return {"post_many_per_s": posts, "cycles_per_s": jobs / (time.perf_counter() - started)}


async def procrastinate_posts(url: str, count: int, posters: int) -> float:
    async with _procrastinate(url, lambda: None, pool=posters) as (_, _queue, deferrer):
        return await timed_posts(lambda n: deferrer.defer_async(n=n), count, posters)


async def procrastinate_wake(url: str, samples: int) -> float:
    ran = asyncio.Event()
    async with _procrastinate(url, ran.set) as (app, queue, deferrer):
        task = asyncio.ensure_future(app.run_worker_async(queues=[queue], concurrency=1))
        try:
            return await wake_latency(lambda: deferrer.defer_async(n=0), ran, samples)
        finally:
            await stopped(task)


# -- SAQ's postgres mode (psycopg 3): no bulk enqueue; Worker runs the jobs ----------------------------

@contextlib.asynccontextmanager
async def _saq(url: str) -> Any:
    from saq import Queue

    queue = Queue.from_url(url.replace("postgresql://", "postgres://", 1), name=f"q{uuid.uuid4().hex[:8]}")
    await queue.connect()
    try:
        yield queue
    finally:
        await bounded(queue.disconnect(), 10, cancel=False)


async def saq_cycle(url: str, jobs: int, workers: int) -> Result:
    from saq import Worker

    done = [0]
    finished = asyncio.Event()

    async def cycle(ctx: Any, *, n: int) -> None:
        done[0] += 1
        if done[0] == jobs:
            finished.set()

    async with _saq(url) as queue:
        await timed_posts(lambda n: queue.enqueue("cycle", n=n), jobs, 16)  # no bulk API: not timed as one
        worker = Worker(queue, functions=[("cycle", cycle)], concurrency=workers)
        started = time.perf_counter()
        task = asyncio.ensure_future(worker.start())
        await asyncio.wait_for(finished.wait(), 120)
        elapsed = time.perf_counter() - started
        await bounded(worker.stop(), 10, cancel=False)
        await stopped(task)
        return {"post_many_per_s": None, "cycles_per_s": jobs / elapsed}


async def saq_posts(url: str, count: int, posters: int) -> float:
    async with _saq(url) as queue:
        return await timed_posts(lambda n: queue.enqueue("cycle", n=n), count, posters)


async def saq_wake(url: str, samples: int) -> float:
    from saq import Worker

    ran = asyncio.Event()

    async def cycle(ctx: Any, *, n: int) -> None:
        ran.set()

    async with _saq(url) as queue:
        worker = Worker(queue, functions=[("cycle", cycle)], concurrency=1)
        task = asyncio.ensure_future(worker.start())
        try:
            return await wake_latency(lambda: queue.enqueue("cycle", n=0), ran, samples)
        finally:
            await bounded(worker.stop(), 10, cancel=False)
            await stopped(task)


PEERS: dict[str, tuple[Callable[..., Awaitable[Result]], Callable[..., Awaitable[float]],
                       Callable[..., Awaitable[float]]]] = {
    "pgqueuer": (pgqueuer_cycle, pgqueuer_posts, pgqueuer_wake),
    "procrastinate": (procrastinate_cycle, procrastinate_posts, procrastinate_wake),
    "saq": (saq_cycle, saq_posts, saq_wake),
}
"""name -> (cycle, posts, wake)."""
