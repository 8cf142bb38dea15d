"""``jobboard stats``: a board's figures, read once (:func:`jobboard.observe.stats.read_stats`), as text or JSON.

The text is also the head of ``jobboard top``'s screen (:func:`stats_lines`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from jobboard.board.contract import JobBoard
from jobboard.cli.limits import flow_lines
from jobboard.cli.output import format_table, print_json
from jobboard.errors import Unsupported
from jobboard.job import JobState, Priority
from jobboard.observe.stats import BoardStats, read_stats

STATES = (JobState.UNCLAIMED.value, JobState.CLAIMED.value, JobState.WAITING.value)
PRIORITIES = tuple(priority.name.lower() for priority in sorted(Priority, reverse=True))


def duration(seconds: float | None) -> str:
    """``-``, ``4.2s``, ``3m05s``, ``2h03m`` or ``3d04h``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, hours = int(seconds // 60), int(seconds // 3600)
    if seconds < 3600:
        return f"{minutes}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def counts_text(counts: Mapping[str, int], order: tuple[str, ...]) -> str:
    """``unclaimed 3, claimed 1`` in ``order`` (then any other key), zeros left out (``none`` if all are)."""
    keys = [key for key in order if counts.get(key)] + sorted(key for key in counts if key not in order and counts[key])
    return ", ".join(f"{key} {counts[key]}" for key in keys) or "none"


def stats_lines(stats: BoardStats, *, max_names: int | None = None) -> list[str]:
    """The figures as lines of text: totals, jobs per name, and each live worker with what it runs."""
    lines = [
        f"jobs: {stats.total} ({counts_text(stats.by_state, STATES)})",
        f"by priority: {counts_text(stats.by_priority, PRIORITIES)}",
        f"oldest unclaimed: {duration(stats.oldest_unclaimed_age)}    trash: {stats.trash_size}    "
        + f"workers: {len(stats.workers)}",
    ]
    if stats.records:
        lines.append(f"records of plans and schedules: {stats.records} (not counted above)")
    names = sorted(stats.by_name.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    if names:
        shown = names if max_names is None else names[:max_names]
        rows = [(name, *(str(counts.get(state, 0)) for state in STATES)) for name, counts in shown]
        lines += ["", *format_table(("name", *STATES), rows).splitlines()]
        if len(shown) < len(names):
            lines.append(f"... and {len(names) - len(shown)} more names")
    lines += ["", *worker_lines(stats)]
    return lines


def worker_lines(stats: BoardStats) -> list[str]:
    """A table of the live workers: name, jobs held, the first few of them."""
    if not stats.workers:
        return ["no live workers registered"]
    rows = []
    for worker in stats.workers:
        running = [f"{job_id} {name}" + (f" {duration(stats.at - since)}" if since is not None else "")
                   for job_id, name, since in worker.running]
        text = ", ".join(running[:3]) + (f", ... ({len(running) - 3} more)" if len(running) > 3 else "")
        rows.append((worker.name, str(len(running)), text or "idle"))
    return format_table(("worker", "jobs", "running"), rows).splitlines()


def stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")


async def stats(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the board's figures: one listing, one pass over the trash, the entities (no read per job), and
    the flow control (limits with their running and waiting jobs, pauses) where the backend has it."""
    figures = await read_stats(board)
    if args.json:
        record = figures.to_json()
        try:
            record["limits"] = [each.to_json() for each in await board.limits()]
            record["paused"] = (await board.paused()).to_json()
        except Unsupported:
            pass
        print_json(record)
    else:
        flow = await flow_lines(board)
        print("\n".join(stats_lines(figures) + ([] if flow is None else ["", *flow])))
    return 0
