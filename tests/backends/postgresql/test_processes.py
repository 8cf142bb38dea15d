"""postgresql://: claims die with their owner, for real processes, and a worker outlives a server restart.

- A SIGKILLed owner's claim is claimable again once its connection drops (the reaper's next pass).
- A SIGSTOPped owner's claim is claimable again after the session timeout (the server ends its
  idle session), and its settle after SIGCONT raises ``ClaimLost`` and changes nothing.
- A worker keeps working across ``pg_ctl stop -m immediate`` and a restart of its server: every job
  is consumed, none twice, none lost.

The measured seconds are printed (``-s``) and written in docs/backends/postgresql.md. Run this module
as ``python -m tests.backends.postgresql.test_processes URL`` for the owner process these tests kill or stop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from jobboard import Handlers, JobBoard, JobContext, JobState, NewJob, Worker, WorkerConfig, open_board
from jobboard.errors import ClaimLost
from tests.support.pgserver import PostgresServer, ensure_postgresql_installed, postgresql_url  # noqa: F401

pytestmark = pytest.mark.timeout(90)

ROOT = str(Path(__file__).resolve().parents[3])


async def owner_process(url: str) -> asyncio.subprocess.Process:
    """A process that claims the board's job and says so, then consumes it when told (``consume``)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.backends.postgresql.test_processes", url, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)


async def read_line(process: asyncio.subprocess.Process, limit: float = 20.0) -> str:
    assert process.stdout is not None
    return (await asyncio.wait_for(process.stdout.readline(), limit)).decode().strip()


async def reclaim(board: JobBoard, limit: float) -> tuple[float, int]:
    """Seconds until ``board`` claims the job again (polled every 10 ms), and the claim's generation."""
    started = time.monotonic()
    with anyio.fail_after(limit):
        for _ in itertools.count():  # polled: the reclaim is what is measured, no event tells it
            if (claim := await board.claim_next("rescuer")) is not None:
                break
            await anyio.sleep(0.01)
    elapsed = time.monotonic() - started
    assert claim is not None
    await board.consume(claim)
    return elapsed, claim.generation


async def until(condition: Callable[[], bool], limit: float) -> None:
    with anyio.fail_after(limit):
        for _ in itertools.count():  # polled: the handler's count is plain data
            if condition():
                return
            await anyio.sleep(0.01)


def fresh(url: str, **options: object) -> str:
    query = "".join(f"&{name}={value}" for name, value in options.items())
    return f"{url}?board=processes-{uuid.uuid4().hex}{query}"


async def test_a_sigkilled_owners_claim_is_claimable_within_a_second(postgresql_url: str) -> None:  # noqa: F811
    url = fresh(postgresql_url)
    async with open_board(url) as board:
        job = await board.post("victim")
        owner = await owner_process(url)
        try:
            claimed, job_id, generation = (await read_line(owner)).split()
            assert (claimed, job_id) == ("claimed", job.id)
            owner.kill()
            elapsed, again = await reclaim(board, 10.0)
        finally:
            if owner.returncode is None:
                owner.kill()
            await owner.wait()
        print(f"SIGKILLed owner -> claimable again: {elapsed:.3f} s")
        assert again > int(generation)
        assert elapsed < 3.0, f"{elapsed:.2f} s (the contract says about the reap interval, 0.5 s)"
        assert await board.state(job) is JobState.COMPLETE


async def test_a_stopped_owner_loses_its_claim_after_the_session_timeout_and_its_settle_is_refused(
    postgresql_url: str,  # noqa: F811
) -> None:
    url = fresh(postgresql_url, session_timeout=2)
    async with open_board(url) as board:
        job = await board.post("victim")
        owner = await owner_process(url)
        try:
            assert (await read_line(owner)).split()[:2] == ["claimed", job.id]
            owner.send_signal(signal.SIGSTOP)
            elapsed, _ = await reclaim(board, 15.0)
            owner.send_signal(signal.SIGCONT)
            assert owner.stdin is not None
            owner.stdin.write(b"consume\n")
            verdict = await read_line(owner)
        finally:
            owner.send_signal(signal.SIGCONT)
            if owner.returncode is None:
                owner.kill()
            await owner.wait()
        print(f"SIGSTOPped owner (session_timeout=2) -> claimable again: {elapsed:.3f} s")
        assert 1.5 < elapsed < 2.0 + 3.0
        assert verdict == "lost", f"the stale owner's consume said {verdict!r}"
        assert await board.state(job) is JobState.COMPLETE  # consumed once, by the rescuer


async def test_a_worker_keeps_working_across_an_immediate_server_restart_and_logs_the_outage_without_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ensure_postgresql_installed()
    caplog.set_level(logging.WARNING)
    with PostgresServer() as server:
        url = fresh(server.url(), session_timeout=2, retry_window=20)
        runs: Counter[str] = Counter()
        handlers = Handlers()

        @handlers.register("work")
        async def work(ctx: JobContext) -> None:
            runs[ctx.job.id] += 1
            await anyio.sleep(0.005)

        async with open_board(url) as poster, open_board(url) as board:
            jobs = {job.id for job in await poster.post_many([NewJob("work") for _ in range(300)])}
            worker = Worker(board, handlers, WorkerConfig(concurrency=4))
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await until(lambda: len(runs) >= 60, 30)
                await anyio.to_thread.run_sync(server.stop_immediately)
                await anyio.sleep(0.5)
                await anyio.to_thread.run_sync(server.start)
                await until(lambda: jobs <= set(runs), 60)
                worker.stop()
            twice = sorted(job_id for job_id, count in runs.items() if count > 1)
            print(f"server restart under a worker: {len(runs)} jobs run, {len(twice)} run twice (cut by the crash)")
            assert set(runs) == jobs and await poster.job_count() == 0
            assert len(twice) <= 8, f"jobs run twice: {twice}"  # only those in flight at the crash
            assert [item async for item in poster.trashed()] == []
    # seen by hand: asyncpg's pool logged a whole traceback a second while the server was down
    noisy = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info or r.exc_text]
    assert noisy == [], f"tracebacks logged during the outage: {noisy}"


async def _own_one(url: str) -> None:
    """The owner process: claim the board's job, say so, consume it when told, say how that went."""
    async with open_board(url) as board:
        while (claim := await board.claim_next("owner")) is None:
            await board.wait()
        print(f"claimed {claim.job.id} {claim.generation}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        try:
            await board.consume(claim)
            print("consumed", flush=True)
        except ClaimLost:
            print("lost", flush=True)


if __name__ == "__main__":
    asyncio.run(_own_one(sys.argv[1]))
