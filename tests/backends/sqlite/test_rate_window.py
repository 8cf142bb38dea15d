"""sqlite://'s flow-control figures (jobboard_sqlite.flow.gate: read with the version, 64 limits a statement) and its
rate check (Gate._rate_due) on a ring of ``count`` slots a group: two rated groups whose grants interleave each
get exactly ``count`` claims a window and keep ``count`` rows; a change of count rebuilds the ring from the latest
grants; grants later than now (a boot before's) do not hold; a version 2 file's grant log becomes the ring."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobboard import HeldBack, NewJob, open_board
from jobboard_sqlite import flow, grants
from jobboard_sqlite.schema import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(30)


async def test_interleaved_rated_groups_each_get_their_count_and_keep_count_rows(tmp_path: Path) -> None:
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
        await anyio.sleep(period + 0.1)  # every grant a period old: the next grant overwrites its group's oldest
        await board.claim(jobs["a"][3], "w")
        with sqlite3.connect(path) as conn:
            left = dict(conn.execute("SELECT grp, count(*) FROM jb_grant GROUP BY grp").fetchall())
            latest = dict(conn.execute("SELECT grp, max(n) FROM jb_grant GROUP BY grp").fetchall())
        assert left == {"a": 3, "b": 3} and latest == {"a": 3, "b": 2}


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


async def held_for(board: Any, job: Any) -> float:
    """``claim(job)`` is refused by the group's rate: its ``retry_after``."""
    with pytest.raises(HeldBack) as held:
        await board.claim(job, "w")
    assert held.value.why == "rate" and held.value.retry_after is not None
    return held.value.retry_after


async def test_a_change_of_count_keeps_the_latest_grants_and_a_cleared_rate_too(tmp_path: Path) -> None:
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=ring") as board:
        await board.set_limit("g", rate=(3, 600.0))
        jobs = [await board.post("w", group="g") for _ in range(8)]
        for job in jobs[:3]:
            await board.claim(job, "w")
        assert 590 < await held_for(board, jobs[3]) <= 600
        await board.set_limit("g", rate=(2, 600.0))  # the window holds 3: still held
        assert 590 < await held_for(board, jobs[3]) <= 600
        await board.set_limit("g", rate=(5, 600.0))  # the ring kept the window's 3 (not the latest 2): 2 more permits
        for job in jobs[3:5]:
            await board.claim(job, "w")
        assert 590 < await held_for(board, jobs[5]) <= 600
        assert await board.clear_limit("g")
        await board.set_limit("g", rate=(5, 600.0))  # the grants survive a cleared rate
        await held_for(board, jobs[5])


async def test_a_dropped_rates_grants_stay_for_its_period_then_are_swept(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=drop") as board:
        await board.set_limit("long", rate=(2, 600.0))
        await board.set_limit("short", rate=(2, 0.2))
        for group in ("long", "short"):
            for job in [await board.post("w", group=group) for _ in range(2)]:
                await board.claim(job, "w")
        assert await board.clear_limit("long")
        await board.set_limit("short", concurrency=5)  # its rate dropped, the limit kept
        await board.purge()  # a sweep within both periods: every grant stays
        grants_of = "SELECT grp, count(*) FROM jb_grant WHERE slot>=0 GROUP BY grp"
        with sqlite3.connect(path) as conn:
            assert dict(conn.execute(grants_of)) == {"long": 2, "short": 2}
        await anyio.sleep(0.3)
        await board.purge()  # the short period is over
        with sqlite3.connect(path) as conn:
            assert dict(conn.execute(grants_of)) == {"long": 2}
            assert conn.execute("SELECT count(*) FROM jb_grant WHERE grp='short'").fetchone()[0] == 0
        await board.set_limit("long", rate=(2, 600.0))  # set again within its period: its grants hold
        await held_for(board, await board.post("w", group="long"))


async def test_grants_later_than_now_from_a_boot_before_do_not_hold(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=boot") as board:
        await board.set_limit("g", rate=(2, 600.0))
        jobs = [await board.post("w", group="g") for _ in range(5)]
        for job in jobs[:2]:
            await board.claim(job, "w")
        await held_for(board, jobs[2])
        with sqlite3.connect(path) as conn:  # the host's monotonic clock restarted: the grants are in its future
            conn.execute("UPDATE jb_grant SET at=at+1e7")
        for job in jobs[2:4]:
            await board.claim(job, "w")
        assert 590 < await held_for(board, jobs[4]) <= 600  # the two new grants fill the window


async def test_a_version_2_files_grant_log_becomes_the_ring(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=old") as board:
        await board.set_limit("g", rate=(3, 600.0))
        jobs = [await board.post("w", group="g") for _ in range(2)]
    now = time.monotonic()
    with sqlite3.connect(path, isolation_level=None) as conn:  # what version 2 kept: a log of grant times
        for statement in ("DROP TABLE jb_grant", "ALTER TABLE jb_limit DROP COLUMN ring",
                          "CREATE TABLE jb_grant(board INTEGER NOT NULL, grp TEXT NOT NULL, at REAL NOT NULL)",
                          "CREATE INDEX jb_grant_at ON jb_grant(board, grp, at)", "DROP INDEX jb_key_expires",
                          "ALTER TABLE jb_key DROP COLUMN expires", "PRAGMA user_version=2"):
            conn.execute(statement)
        board_id = conn.execute("SELECT id FROM jb_board WHERE name='old'").fetchone()[0]
        conn.executemany("INSERT INTO jb_grant VALUES (?, 'g', ?)",
                         [(board_id, now - ago) for ago in (700.0, 10.0, 5.0, 1.0)])
    async with open_board(f"sqlite://{path}?board=old") as board:
        assert 585 < await held_for(board, jobs[0]) <= 590  # the latest 3 kept: due when the one 10 s ago is 600 s
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*), max(n) FROM jb_grant").fetchone() == (3, 2)


async def test_two_boards_on_one_file_share_the_ring(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=shared"
    async with open_board(url) as one, open_board(url) as two:
        await one.set_limit("g", rate=(4, 600.0))
        await one.post_many([NewJob("w", group="g") for _ in range(10)])
        taken = [await board.claim_next("w") for _ in range(4) for board in (one, two)]
        assert sum(claim is not None for claim in taken) == 4  # each board's grants count in the other's window
        await two.set_limit("g", rate=(6, 600.0))  # a bigger count on the other board: 2 more, from either
        assert await one.claim_next("w") is not None and await two.claim_next("w") is not None
        assert await one.claim_next("w") is None and await two.claim_next("w") is None


async def test_a_ring_wraps_in_place_with_two_boards_granting_in_turn(tmp_path: Path) -> None:
    """Grants past the ring's count overwrite their slot in place; a board proves its next number by one probe of
    its slot, or finds the other board's grant there and searches: each window (made old by moving the times
    back) gets exactly ``count`` claims from the two boards in turn, and the ring keeps ``count`` rows."""
    assert time.monotonic() > 100  # (grant times moved back stay positive, as every clock reading is)
    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=wrap") as one, open_board(f"sqlite://{path}?board=wrap") as two:
        await one.set_limit("g", rate=(3, 60.0))
        await one.post_many([NewJob("w", group="g") for _ in range(12)])
        for window in range(3):
            taken = [await board.claim_next("w") for _ in range(3) for board in (one, two)]
            assert sum(claim is not None for claim in taken) == 3, window
            with sqlite3.connect(path) as conn:
                assert conn.execute("SELECT count(*), max(n) FROM jb_grant").fetchone() == (3, 3 * window + 2)
                conn.execute("UPDATE jb_grant SET at=at-61")  # the window is over


def test_the_next_grant_number_is_found_in_any_state_of_a_ring() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE jb_job(board, grp, state, seq)")
    conn.executescript(flow.DDL)
    for ring in (1, 2, 5, 8):
        for granted in range(3 * ring + 2):  # empty, filling, full and wrapped one or more times
            conn.execute("DELETE FROM jb_grant")
            conn.executemany("INSERT OR REPLACE INTO jb_grant(board, grp, slot, at, n) VALUES (1, 'g', ?, 0, ?)",
                             [(number % ring, number) for number in range(granted)])
            assert grants.next_number(conn, 1, "g", ring) == granted
