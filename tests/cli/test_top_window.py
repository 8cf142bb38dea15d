"""``jobboard top``'s throughput line names the time it covers: it counts the events the view saw, so a
view opened less than a minute ago (``--once``: just now) must not claim "last minute: 0 posted" for a
board that was busy a moment before (seen on sqlite://, postgresql:// and redis:// by hand)."""

from __future__ import annotations

import uuid

import anyio

from jobboard import open_board
from jobboard.cli.top import frame_lines
from jobboard.observe.live import LiveBoard
from tests.cli.test_cli import Capture, run


async def _busy(url: str) -> None:
    with anyio.fail_after(10):
        async with open_board(url) as board:
            for _ in range(3):
                await board.post("resize", {"url": "a.png"})
                claim = await board.claim_next("worker-1")
                assert claim is not None
                await board.consume(claim)


def test_top_once_does_not_claim_a_quiet_last_minute(capsys: Capture) -> None:
    url = f"memory://top-window-{uuid.uuid4().hex}"
    anyio.run(_busy, url)  # memory:// keeps the board's history in the process; `top` opens it again
    status, out, _ = run(capsys, "--board", url, "top", "--once")
    assert status == 0
    assert "last minute:" not in out
    assert "since top started (0s ago): 0 posted, 0 consumed, 0 trashed" in out


def test_a_view_watched_for_a_minute_says_last_minute() -> None:
    async def frames() -> tuple[list[str], list[str]]:
        with anyio.fail_after(10):
            async with open_board(f"memory://top-window-{uuid.uuid4().hex}") as board, LiveBoard(board) as live:
                await board.post("resize", {"url": "a.png"})
                await live.changed(0)
                return (frame_lines(live, board.url, max_jobs=1, watched=61.0),
                        frame_lines(live, board.url, max_jobs=1, watched=12.4))

    long, short = anyio.run(frames)
    assert "last minute: 1 posted, 0 consumed, 0 trashed" in long
    assert "since top started (12s ago): 1 posted, 0 consumed, 0 trashed" in short
