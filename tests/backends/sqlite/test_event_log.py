"""The file's event log, pruned to its last ``EVENTS_KEPT`` rows, tells a reader what it lost (review F16), and
only what it lost: another board's events pruned past a reader of an idle board are not a loss of its own.

The reader that falls behind by more than the log's length (another process) is
tests/backends/sqlite/test_review_s.py's F16 case."""

from __future__ import annotations

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.events import EventKind
from jobboard_sqlite import sessions

pytestmark = pytest.mark.timeout(120)


async def test_another_boards_pruned_events_are_no_loss_to_a_reader_of_an_idle_board(tmp_path: str) -> None:
    base = f"sqlite://{tmp_path}/jobs.db"
    with anyio.fail_after(90):
        async with (open_board(f"{base}?board=quiet") as quiet, open_board(f"{base}?board=busy") as busy,
                    open_board(f"{base}?board=quiet") as poster, quiet.events(maxlen=10) as seen,
                    busy.events(maxlen=10)):
            for _ in range(sessions.EVENTS_KEPT // 1000 + 5):  # the busy board's events outgrow the log
                await busy.post_many([NewJob("x") for _ in range(1000)])
                await anyio.sleep(0.05)  # the quiet board's reader reads the (empty for it) log meanwhile
            async with open_board(f"{base}?board=other"):  # a board's first upkeep prunes the log
                pass
            job = await poster.post("y")
            with anyio.fail_after(10):
                event = await anext(seen)
            assert (event.kind, event.job_id) == (EventKind.POSTED, job.id), event

