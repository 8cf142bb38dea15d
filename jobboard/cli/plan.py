"""``jobboard plan list|status|wait|show|cancel|cleanup``: follow the plans on a board."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from jobboard.board.contract import JobBoard
from jobboard.cli import examples
from jobboard.cli.command import examples_epilog
from jobboard.cli.options import shared_options
from jobboard.cli.output import format_table, print_json
from jobboard.cli.plan_list import plan_list
from jobboard.plans.dag import to_dot, to_mermaid
from jobboard.plans.posting import PlanHandle, PlanProgress, PlanStatus, cleanup_interrupted_plans

BAR_WIDTH = 30


PLAN_ACTIONS = {
    "list": "list the plans on the board with their progress (running ones, and ended ones not waited for)",
    "status": "print each task's state, owner or failure reason (exit 1 if the plan failed)",
    "wait": "show progress until the plan ends (exit 0 if it completed, else 1)",
    "show": "draw the plan's graph with each task's state (mermaid or dot)",
    "cancel": "trash every task of the plan that has not started (running ones finish)",
    "cleanup": "trash the plans whose posting was interrupted (no plan id)",
}


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", dest="action", metavar="ACTION", required=True)
    for action, text in PLAN_ACTIONS.items():
        sub = actions.add_parser(action, help=text, description=text, parents=[shared_options()],
                                 epilog=examples_epilog(examples.PLAN_ACTIONS[action]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        if action not in ("cleanup", "list"):
            sub.add_argument("plan_id", help="the plan's id (what post_plan returned)")
        if action in ("list", "status"):
            sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if action == "show":
            sub.add_argument("--format", choices=["mermaid", "dot"], default="mermaid", help="the graph's syntax")


async def plan_command(board: JobBoard, args: argparse.Namespace) -> int:
    if args.action == "cleanup":
        print(f"cleaned up {await cleanup_interrupted_plans(board)} interrupted plan(s)")
        return 0
    if args.action == "list":
        return await plan_list(board, args)
    handle = await PlanHandle.open(board, args.plan_id)
    if args.action == "status":
        status = await handle.status()
        if args.json:
            print_json(status_record(status))
        else:
            print(status_table(status))
        return 0 if status.state in ("running", "complete") else 1
    if args.action == "wait":
        printer = ProgressPrinter()
        outcome = await handle.wait(on_progress=printer)
        printer.finish()
        print(f"plan {handle.name} ({handle.plan_id}): {outcome.state}")
        return 0 if outcome.state == "complete" else 1
    if args.action == "show":
        states = (await handle.status()).states
        print((to_dot if args.format == "dot" else to_mermaid)(handle.tasks, states))
        return 0
    print(f"cancelled {await handle.cancel()} task(s) of plan {handle.name}")
    return 0


def status_table(status: PlanStatus) -> str:
    """A table of the tasks, then one summary line."""
    rows = []
    for name, state in status.states.items():
        note = status.owners.get(name) or status.reasons.get(name, "").split("\n")[0]
        if (reported := status.progress_of.get(name)) is not None:
            note += f" ({reported.fraction:.0%}{' ' + reported.note if reported.note else ''})"
        rows.append([name, state.value, note[:80]])
    progress = status.progress()
    summary = (f"plan {status.name} ({status.plan_id}): {status.state}, {progress.done}/{progress.total} "
               f"complete, {progress.running} running, {progress.failed} failed")
    return f"{format_table(['task', 'state', 'owner / reason'], rows)}\n{summary}"


def status_record(status: PlanStatus) -> dict[str, Any]:
    """``plan status --json``: the plan's state, counts, and every task's state, owner and reason."""
    progress = status.progress()
    tasks = {name: {"state": state.value, "owner": status.owners.get(name), "reason": status.reasons.get(name)}
             for name, state in status.states.items()}
    return {"id": status.plan_id, "name": status.name, "state": status.state, "total": progress.total,
            "done": progress.done, "running": progress.running, "failed": progress.failed, "tasks": tasks}


def progress_line(progress: PlanProgress) -> str:
    filled = BAR_WIDTH * (progress.done + progress.failed) // max(progress.total, 1)
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return (f"[{bar}] {progress.done}/{progress.total} done, {progress.running} running, "
            f"{progress.failed} failed")


class ProgressPrinter:
    """Shows plan progress: redrawn in place on a terminal, a line per quarter otherwise."""

    def __init__(self, stream: TextIO = sys.stderr, prefix: str = "") -> None:
        self.stream, self.prefix = stream, prefix
        self._last: PlanProgress | None = None
        self._quarter = -1

    def __call__(self, progress: PlanProgress) -> None:
        if progress == self._last:
            return
        self._last = progress
        if self.stream.isatty():
            print(f"\r{self.prefix}{progress_line(progress)}", end="", file=self.stream, flush=True)
            return
        quarter = 4 * (progress.done + progress.failed) // max(progress.total, 1)
        if quarter > self._quarter:
            self._quarter = quarter
            print(f"{self.prefix}{progress_line(progress)}", file=self.stream, flush=True)

    def finish(self) -> None:
        if self.stream.isatty():
            print(file=self.stream)
