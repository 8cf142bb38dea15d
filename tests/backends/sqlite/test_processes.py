"""sqlite:// across real processes: a SIGKILLed owner's claims come back at once, a stopped one's after its
session timeout (its stale settles raise ClaimLost and change nothing), a writer killed in the middle
of its transactions leaves a consistent file and every post it was told of, workers in several
processes consume every job once."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import time
from pathlib import Path

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard

pytestmark = pytest.mark.timeout(120)


async def child(url: str, mode: str, count: int) -> tuple[asyncio.subprocess.Process, list[str]]:
    """Start ``tests.support.sqlite_proc`` and return it with the words of its ``ready`` line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.sqlite_proc", url, mode, str(count),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    with anyio.fail_after(30):
        words = (await proc.stdout.readline()).decode().split()
    assert words and words[0] == "ready", words
    return proc, words[1:]


async def reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a child and close its pipes (no transport left open)."""
    if proc.stdin is not None:
        proc.stdin.close()
    await proc.communicate()


async def tell(proc: asyncio.subprocess.Process, line: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()
    with anyio.fail_after(20):
        return (await proc.stdout.readline()).decode().strip()


async def claimable_after(board: JobBoard, count: int, started: float) -> float:
    """Seconds from ``started`` until ``count`` jobs are claimable again (claimed and kept by ``board``)."""
    got = 0
    while got < count:
        claim = await board.claim_next("survivor")
        if claim is None:
            await anyio.sleep(0.005)
            continue
        got += 1
        assert claim.attempt == 2, "the dead owner's attempt stays counted"
    return time.monotonic() - started


async def test_a_killed_owners_claims_are_claimable_within_a_second(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=kill"
    takeovers = []
    async with open_board(url) as board:
        for _ in range(3):
            for i in range(5):
                await board.post(f"j{i}")
            proc, held = await child(url, "hold", 5)
            assert len(held) == 5 and await board.owner(held[0]) == "child"
            started = time.monotonic()
            proc.send_signal(signal.SIGKILL)
            takeovers.append(await claimable_after(board, 5, started))
            await reap(proc)
            async for job in board.iterjobs():
                await board.cancel(job, "next round")
    print(f"SIGKILL -> claimable: {[round(t * 1000) for t in takeovers]} ms")
    assert sorted(takeovers)[1] < 1.0, takeovers  # the median; the reaper ticks every 0.25 s
    assert not list((tmp_path / "jobs.db-jobboard").glob("*.lock")), "the dead sessions' lock files are gone"


async def test_a_stopped_owner_loses_its_claims_and_its_settles_change_nothing(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=stop&session_timeout=1"
    async with open_board(url) as board:
        job = await board.post("slow")
        proc, held = await child(url, "hold", 1)
        assert held == [job.id]
        proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        try:
            with anyio.fail_after(10):
                while (claim := await board.claim_next("survivor")) is None:
                    await board.wait()  # woken by the release of the stopped owner's claim
            took = time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGCONT)
        assert 0.7 < took < 5.0, took  # its last heartbeat may be session_timeout / 4 older than the stop
        assert await tell(proc, "consume") == "ClaimLost"
        assert await board.owner(job) == "survivor" and (await board.get(job)).attempts == 2
        await asyncio.sleep(0.6)  # its upkeep notices its session ended
        assert "SESSION_EXPIRED" in await tell(proc, "events")
        await board.consume(claim)
        await reap(proc)


async def test_a_writer_killed_mid_transaction_leaves_a_consistent_file(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=churn"
    told: list[str] = []
    for round_ in range(4):
        proc, _ = await child(url, "post", 100000)
        assert proc.stdout is not None
        await anyio.sleep(0.2 + 0.1 * round_)
        proc.send_signal(signal.SIGKILL)
        told += (await proc.stdout.read()).decode().split()  # what it printed before it died
        await reap(proc)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    async with open_board(url) as board:
        on_board = {job.id async for job in board.iterjobs()}
    assert told and set(told) <= on_board  # every post a writer returned from is there
    assert len(on_board) - len(told) <= 4  # at most one committed but not yet printed per kill


async def test_four_processes_consume_every_job_once(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=fleet"
    async with open_board(url) as board:
        posted = {job.id for job in await board.post_many([NewJob(f"job{i % 3}", {"i": i}) for i in range(400)])}
    procs = [(await child(url, "work", 400))[0] for _ in range(4)]
    consumed: list[str] = []
    for proc in procs:
        assert proc.stdout is not None
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        consumed += out.decode().split()
    assert sorted(consumed) == sorted(posted), "each job consumed exactly once"
    assert sum(1 for proc in procs if proc.returncode == 0) == 4

