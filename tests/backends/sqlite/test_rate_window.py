"""sqlite://'s rate check (jobboard_sqlite.flow.Gate._rate_due): a bound from two rowids, a count only when the
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
