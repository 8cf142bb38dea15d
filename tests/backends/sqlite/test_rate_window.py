"""sqlite://'s flow-control figures (jobboard_sqlite.flow.gate: read with the version, 64 limits a statement) and its
rate check (Gate._rate_due): a bound from two rowids, a count only when the
bound reaches the rate's count, and grants pruned once two periods old. Two rated groups whose grants
interleave (so each group's rowid span holds the other's grants too) still get exactly ``count`` claims a window."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from jobboard import HeldBack, open_board

pytestmark = pytest.mark.timeout(30)


async def test_interleaved_rated_groups_each_get_their_count_and_old_grants_are_pruned(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    period = 0.5
    async with open_board(f"sqlite://{path}?board=rates") as board:
        for group in ("a", "b"):
            await board.set_limit(group, rate=(3, period))
        jobs = {group: [await board.post("w", group=group) for _ in range(5)] for group in ("a", "b")}
        for index in range(3):  # a, b, a, b, a, b: each group's span of rowids is 5 wide for 3 grants
            for group in ("a", "b"):
                await board.claim(jobs[group][index], "w")
        for group in ("a", "b"):
            with pytest.raises(HeldBack) as held:
                await board.claim(jobs[group][3], "w")
            assert held.value.why == "rate"
        await anyio.sleep(2 * period + 0.1)  # every grant two periods old: the next grant prunes its group's
        await board.claim(jobs["a"][3], "w")
        with sqlite3.connect(path) as conn:
            left = dict(conn.execute("SELECT grp, count(*) FROM jb_grant GROUP BY grp").fetchall())
        assert left == {"a": 1, "b": 3}


async def test_the_figures_of_more_limits_than_one_statement_reads_are_all_judged(tmp_path: Path) -> None:
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=many") as board:
        groups = [f"g{index:03d}" for index in range(150)]  # 3 statements of figures (64 limits each)
        for group in groups:
            await board.set_limit(group, concurrency=1, rate=(5, 600.0))
        warm = await board.post("w")
        jobs = {group: [await board.post("w", group=group) for _ in range(2)] for group in groups[-3:]}
        taken = await board.claim_next("warm")  # the limits cached: the next claims read the figures with the version
        assert taken is not None and taken.job.id == warm.id
        for group in groups[-3:]:
            claims = [await board.claim(job, "w") for job in jobs[group][:1]]
            assert claims
            with pytest.raises(HeldBack) as held:
                await board.claim(jobs[group][1], "w")
            assert held.value.why == "concurrency"
