"""A sqlite:// board that cannot open says why in one line, leaves no thread behind, and says whether retrying
can help (the tryout's problems B and D): a directory named as the board file is permanent (``BoardConflict``),
not "unreachable" (``BackendUnavailable``, the CLI's exit 3, "retrying may help")."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BoardClosed, BoardConflict

pytestmark = pytest.mark.timeout(60)


def sqlite_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name.startswith("jobboard-sqlite") and thread.is_alive())


async def settled_threads() -> int:
    """The board's threads still alive once those told to go had the time to (an idle executor thread ends at
    its next look at its queue)."""
    for _ in range(100):
        if not sqlite_threads():
            break
        await anyio.sleep(0.05)
    return sqlite_threads()


async def test_failed_opens_leave_no_connection_thread_behind(tmp_path: Path) -> None:
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("hello, this is not SQLite\n" * 100)
    before = await settled_threads()
    for _ in range(5):
        with pytest.raises(BoardConflict, match="not a jobboard SQLite database"):
            async with open_board(f"sqlite://{not_a_database}"):
                pass
    assert await settled_threads() == before, "each failed open left its connection thread running"


async def test_a_directory_named_as_the_board_file_is_refused_as_permanent(tmp_path: Path) -> None:
    before = await settled_threads()
    with pytest.raises(BoardConflict, match="is a directory, not a board file") as refused:
        async with open_board(f"sqlite://{tmp_path}"):
            pass
    assert "\n" not in str(refused.value)
    assert await settled_threads() == before


def delete_files(where: Path) -> None:
    for path in where.glob("jobs.db*"):
        if path.is_file():
            path.unlink()


async def test_a_post_right_after_the_file_was_deleted_is_refused_not_lost(tmp_path: Path) -> None:
    """A write looks at the file first: between a deletion and the next upkeep (``reap_interval``) a post went to
    the deleted file, reported applied, and was lost with it (the second review's note on F7)."""
    db = tmp_path / "jobs.db"
    with anyio.fail_after(20):
        async with open_board(f"sqlite://{db}?reap_interval=30") as board:
            await board.post("before")
            delete_files(tmp_path)
            with pytest.raises(BoardClosed, match="was deleted under this board"):
                await board.post("after")
