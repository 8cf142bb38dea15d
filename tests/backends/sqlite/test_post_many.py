"""sqlite:// ``post_many``'s plain rows (no key, no dependencies): one ``executemany`` whose absent values are
bound as ``''`` and stored as NULL; what a row stores is what ``post`` stores for the same posting."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jobboard import NewJob, open_board
from jobboard.job import JobState

pytestmark = pytest.mark.timeout(60)

COLUMNS = "rank, name, state, not_before IS NULL, attempts, waiting, max_attempts, keep, result_ttl, key, deps, grp"


def stored(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {COLUMNS}, typeof(posting) FROM jb_job ORDER BY seq").fetchall()


async def test_a_plain_batch_stores_what_post_stores(tmp_path: Path) -> None:
    options: list[dict[str, Any]] = [{}, {"priority": "high", "max_attempts": 3, "keep_result": True, "result_ttl": 5.0, "group": "g-1"},
               {"delay": 60.0, "trash_ttl": 7.0}]
    async with open_board(f"sqlite://{tmp_path}/one.db") as board:
        singles = [await board.post("resize", {"n": n}, **option) for n, option in enumerate(options)]
    async with open_board(f"sqlite://{tmp_path}/many.db") as board:
        batch = await board.post_many([NewJob("resize", {"n": n}, **option) for n, option in enumerate(options)])
        read = [await board.get(job.id) for job in batch]
        states = [await board.state(job.id) for job in batch]
    assert stored(tmp_path / "many.db") == stored(tmp_path / "one.db")
    assert stored(tmp_path / "many.db")[0] == (2, "resize", 0, 1, 0, 0, None, 0, None, None, 0, None, "blob")
    assert [job.id for job in batch] == [job.id for job in singles]
    for job, again, single in zip(batch, read, singles, strict=True):
        assert (again.details, again.priority, again.max_attempts, again.keep_result, again.result_ttl,
                again.trash_ttl, again.group) == (single.details, single.priority, single.max_attempts,
                                                  single.keep_result, single.result_ttl, single.trash_ttl, single.group)
        assert again == job
    assert read[2].not_before is not None and read[0].not_before is None
    assert states == [JobState.UNCLAIMED] * 3


async def test_plain_rows_before_a_linked_one_are_written_first(tmp_path: Path) -> None:
    async with open_board(f"sqlite://{tmp_path}/jobs.db") as board:
        first, second, linked = await board.post_many([NewJob("a"), NewJob("b"), NewJob("c")])
        later = await board.post_many([NewJob("d", depends_on=[first.id]), NewJob("e", key="k")])
        assert [job.sequence for job in (first, second, linked, *later)] == [1, 2, 3, 4, 5]
        assert await board.state(later[0].id) is JobState.WAITING
        assert (await board.get(later[1].id)).key == "k"
