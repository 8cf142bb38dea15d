"""``jobboard plan list``: the plans on a board with their progress, from one listing of the board.

A plan is on the board while its record is (see :mod:`jobboard.plans.posting`): from ``post_plan`` until a
``wait`` saw it end. Each task's state comes from the same listing: a task on the board has its
listed state, one in the trash is trashed, any other was consumed. No read per task.
"""

from __future__ import annotations

import argparse
from typing import Any

from jobboard.board.contract import JobBoard
from jobboard.cli.jobs import listed_jobs
from jobboard.cli.output import format_table, format_time, print_json
from jobboard.job import Job, JobState
from jobboard.plans.posting import RECORD, PlanHandle, PlanStatus


def plan_handles(board: JobBoard, records: list[Job]) -> list[PlanHandle]:
    """The plan records that are well-formed manifests (others are skipped)."""
    handles = []
    for job in records:
        try:
            handles.append(PlanHandle(board, job.id, dict(job.details)))
        except (KeyError, TypeError, AttributeError):
            continue  # not a manifest post_plan wrote
    return handles


async def plan_statuses(board: JobBoard) -> list[tuple[PlanStatus, float]]:
    """Each plan on the board (oldest first) with its status and when it was posted."""
    listed = await listed_jobs(board)
    states = {item.job.id: item.state for item in listed}
    handles = plan_handles(board, sorted((item.job for item in listed if item.job.name == RECORD),
                                         key=lambda job: job.created_at))
    created = {item.job.id: item.job.created_at for item in listed}
    reasons: dict[str, str] = {}
    if handles:
        reasons = {item.job.id: item.reason async for item in board.trashed()}
    found = []
    for handle in handles:
        task_states = {name: states.get(job_id, JobState.TRASHED if job_id in reasons else JobState.COMPLETE)
                       for name, job_id in handle.ids.items()}
        task_reasons = {name: reasons[job_id] for name, job_id in handle.ids.items() if job_id in reasons}
        found.append((PlanStatus(handle.plan_id, handle.name, task_states, {}, task_reasons),
                      created[handle.plan_id]))
    return found


def plan_record(status: PlanStatus, posted_at: float) -> dict[str, Any]:
    progress = status.progress()
    return {"id": status.plan_id, "name": status.name, "state": status.state, "posted_at": posted_at,
            "total": progress.total, "done": progress.done, "running": progress.running,
            "failed": progress.failed,
            "waiting": status.counts[JobState.WAITING], "unclaimed": status.counts[JobState.UNCLAIMED]}


async def plan_list(board: JobBoard, args: argparse.Namespace) -> int:
    """Print the plans on the board: state and task counts (a table, or JSON with ``--json``)."""
    records = [plan_record(status, posted_at) for status, posted_at in await plan_statuses(board)]
    if args.json:
        print_json(records)
        return 0
    rows = [(r["id"], r["name"], r["state"], format_time(r["posted_at"]), f"{r['done']}/{r['total']}",
             str(r["running"]), str(r["failed"]), str(r["unclaimed"] + r["waiting"])) for r in records]
    print(format_table(("id", "name", "state", "posted_at", "done", "running", "failed", "pending"), rows))
    return 0
