"""Flow control on sqlite:// beyond the conformance cases: a concurrency limit holds across processes
(the permits are the claimed rows, counted in each claim's transaction), and a file of schema version 1
is upgraded in place when a board of this version opens it."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard_sqlite.schema import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(120)

WORKER = """
import sys, time, anyio
from jobboard import open_board

async def main(url, claimers):
    async with open_board(url) as board:
        async def work(index):
            idle = 0
            while idle < 40:  # a second with nothing to claim: the board is drained
                claim = await board.claim_next(f"w{index}")
                if claim is None:
                    idle += 1
                    await anyio.sleep(0.025)
                    continue
                idle = 0
                started = time.monotonic()
                await anyio.sleep(0.02)
                print(claim.job.id, started, time.monotonic(), flush=True)
                await board.consume(claim)
        async with anyio.create_task_group() as group:
            for index in range(claimers):
                group.start_soon(work, index)

anyio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of the spans that overlap at one instant."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


async def test_a_concurrency_limit_holds_across_processes(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=flow"
    async with open_board(url) as board:
        await board.set_limit("tenant", concurrency=2)
        posted = {(await board.post("work", group="tenant")).id for _ in range(24)}
        free = {(await board.post("work")).id for _ in range(8)}
        with anyio.fail_after(90):
            procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", WORKER, url, "4",
                                                          stdout=asyncio.subprocess.PIPE) for _ in range(2)]
            outputs = [(await proc.communicate())[0].decode().split("\n") for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0]
        lines = [line.split() for output in outputs for line in output if line]
        spans = [(float(start), float(end)) for job, start, end in lines if job in posted]
        assert sorted(job for job, _, _ in lines) == sorted(posted | free)  # every job once
        assert most_at_once(spans) <= 2  # 8 claimers in 2 processes, never more than 2 of the group at once
        assert most_at_once([(float(start), float(end)) for job, start, end in lines]) > 2  # the others ran beside
        assert await board.limits() != [] and (await board.limits())[0].running == 0


def downgrade_to_version_1(path: Path) -> None:
    """What a file of schema version 1 was: no group column, no flow-control tables or columns."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        for statement in ("DROP INDEX jb_job_grp", "DROP TABLE jb_limit", "DROP TABLE jb_grant", "DROP TABLE jb_pause",
                          "ALTER TABLE jb_job DROP COLUMN grp", "ALTER TABLE jb_board DROP COLUMN flow",
                          "ALTER TABLE jb_board DROP COLUMN paused", "DROP INDEX jb_key_expires",
                          "ALTER TABLE jb_key DROP COLUMN expires", "PRAGMA user_version=1"):
            conn.execute(statement)
    finally:
        conn.close()


async def test_a_version_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=old") as board:
        old = await board.post("work")
    downgrade_to_version_1(path)
    async with open_board(f"sqlite://{path}?board=old") as board:
        await board.set_limit("g", concurrency=1)
        grouped = [await board.post("work", group="g") for _ in range(2)]
        first, second, third = [await board.claim_next("w") for _ in range(3)]
        assert first is not None and first.job.id == old.id
        assert second is not None and second.job.id == grouped[0].id and second.job.group == "g"
        assert third is None  # the group's one permit is taken
    conn = sqlite3.connect(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
