"""``jobboard top``: a live view of a board in the terminal, refreshed from the board's events.

The figures come from :class:`jobboard.observe.live.LiveBoard` (one listing, then one event subscription: no
polling, no read per job). A change redraws the screen at most :data:`MIN_REDRAW_GAP` after the last
redraw; without changes the screen is redrawn every ``--interval`` seconds (ages move on). Plain
ANSI: on a terminal each frame is drawn over the last; otherwise frames follow each other as text.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from typing import TextIO

import anyio

from jobboard.board.contract import JobBoard
from jobboard.cli.command import positive_whole_number
from jobboard.cli.jobs import job_record, list_columns
from jobboard.cli.limits import flow_lines
from jobboard.cli.options import shown
from jobboard.cli.output import format_table, format_time
from jobboard.cli.stats import stats_lines
from jobboard.errors import JobBoardError
from jobboard.observe.live import LiveBoard

MIN_REDRAW_GAP = 0.25
"""Seconds between two redraws at least: a busy board is drawn at most four times a second."""
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
THROUGHPUT_BUCKETS = 6
"""The throughput line sums the last six 10-s buckets: the last minute."""
NAMES_SHOWN = 8
JOBS_WHEN_NOT_A_TERMINAL = 20


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"not a number > 0: {text!r}")
    return value


def top_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS",
                        help="redraw at least this often (default 1); changes redraw sooner, "
                             f"at most {int(1 / MIN_REDRAW_GAP)} times a second")
    parser.add_argument("--jobs", type=positive_whole_number, default=None, metavar="N",
                        help=f"show the first N jobs (default: what fits the terminal; "
                             f"{JOBS_WHEN_NOT_A_TERMINAL} when not a terminal)")
    ends = parser.add_mutually_exclusive_group()
    ends.add_argument("--once", action="store_true", help="draw one frame and exit")
    ends.add_argument("--iterations", type=positive_whole_number, default=None, metavar="N",
                      help="draw N frames and exit (default: until Ctrl-C)")


def frame_lines(live: LiveBoard, url: str, *, max_jobs: int | None, height: int | None = None,
                flow: list[str] | None = None, watched: float = float("inf")) -> list[str]:
    """One screen: a title, the board's figures (and ``flow``: pauses and limits), the last minute's
    throughput, and the first jobs (``max_jobs`` of them, else as many as fit in ``height`` lines, else all).

    The throughput counts the events seen, so with ``watched`` (seconds since the view opened) under a
    minute the line says it covers only that time, not the last minute (``--once``: 0 s)."""
    stats = live.stats()
    recent = live.throughput()[-THROUGHPUT_BUCKETS:]
    posted, consumed, trashed = (sum(bucket[column] for bucket in recent) for column in (1, 2, 3))
    lines = [f"jobboard top: {url} at {format_time(stats.at)}"]
    if not live.healthy:
        lines.append("board unreachable: the view may be stale (reconnecting)")
    lines += stats_lines(stats, max_names=NAMES_SHOWN)
    if flow:
        lines += ["", *flow]
    window = "last minute" if watched >= 60 else f"since top started ({watched:.0f}s ago)"
    lines += ["", f"{window}: {posted} posted, {consumed} consumed, {trashed} trashed", ""]
    jobs = live.jobs()
    if max_jobs is None and height is not None:
        max_jobs = max(height - len(lines) - 3, 1)  # the table's header, "... more", the cursor's line
    shown = jobs if max_jobs is None else jobs[:max_jobs]
    records = [job_record(item.job, item.state, item.owner) for item in shown]
    columns = list_columns(records, time.time())
    lines += format_table([header for header, _ in columns],
                          [[cell(record) for _, cell in columns] for record in records]).splitlines()
    if len(shown) < len(jobs):
        lines.append(f"... and {len(jobs) - len(shown)} more jobs")
    return lines


def draw(lines: list[str], stream: TextIO, terminal: bool) -> None:
    """Write one frame: over the last one on a terminal (cut to its size), else after it."""
    if terminal:
        width, height = shutil.get_terminal_size()
        text = "".join(f"{line[:width]}{CLEAR_LINE}\n" for line in lines[:height - 1])
        stream.write(f"{HOME}{text}{CLEAR_BELOW}")
    else:
        stream.write("\n".join(lines) + "\n\n")
    stream.flush()


async def top(board: JobBoard, args: argparse.Namespace) -> int:
    """Draw the live view until Ctrl-C, or for ``--once`` / ``--iterations`` frames."""
    stream = sys.stdout
    terminal = stream.isatty()
    frames = 1 if args.once else args.iterations
    async with LiveBoard(board) as live:
        opened = time.monotonic()
        drawn, flow, flow_read = 0, await _flow(board, []), opened
        while True:
            started, version = time.monotonic(), live.version
            if flow is not None and started - flow_read >= args.interval:  # one read an interval at most
                flow, flow_read = await _flow(board, flow), started
            max_jobs = args.jobs if args.jobs is not None or terminal else JOBS_WHEN_NOT_A_TERMINAL
            height = shutil.get_terminal_size().lines if terminal else None
            draw(frame_lines(live, shown(args, board.url), max_jobs=max_jobs, height=height, flow=flow,
                             watched=time.monotonic() - opened), stream, terminal)
            drawn += 1
            if frames is not None and drawn >= frames:
                return 0
            with anyio.move_on_after(args.interval):
                await live.changed(version)
            await anyio.sleep(max(0.0, started + MIN_REDRAW_GAP - time.monotonic()))


async def _flow(board: JobBoard, last: list[str]) -> list[str] | None:
    """The flow-control lines (read from the board: no event tells them), ``None`` for a backend without
    flow control (never asked again), or the ``last`` ones while the board cannot be read."""
    try:
        return await flow_lines(board)
    except JobBoardError:
        return last
