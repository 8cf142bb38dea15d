"""Reads of one board (each in its caller's read transaction, on the connection's thread)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from jobboard.backend import (
    Claim,
    Entity,
    Job,
    JobState,
    ListedJob,
    MalformedEntry,
    Outcome,
    TrashedJob,
    decode_value,
)
from jobboard.errors import JobNotFound
from jobboard_sqlite import flow
from jobboard_sqlite.rows import JOB_COLUMNS, Scope, job_id, name_filter, seq_of, to_job
from jobboard_sqlite.schema import CLAIMED, TRASHED, UNCLAIMED, WAITING
from jobboard_sqlite.trash import LIVE_RESULT, LIVE_TRASH

PAGE = 500
STATES = {UNCLAIMED: JobState.UNCLAIMED, CLAIMED: JobState.CLAIMED, WAITING: JobState.WAITING}


def get(conn: sqlite3.Connection, scope: Scope, job: str) -> Job:
    """:raises JobNotFound: not on the board. :raises MalformedEntry: its posting is not one."""
    seq = seq_of(job)
    row = None if seq is None else conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jb_job WHERE board=? AND seq=? AND state IN (0,1,2)",
        (scope.board, seq)).fetchone()
    if row is None:
        raise JobNotFound(f"job {job} is not on the board")
    return to_job(row)


def page(conn: sqlite3.Connection, scope: Scope, only_unclaimed: bool, after: tuple[int, int],
         malformed: list[str]) -> tuple[list[ListedJob], tuple[int, int] | None]:
    """Up to :data:`PAGE` listed jobs after ``after`` (rank, seq) in board order, and where the next
    page starts (``None``: the end). Malformed rows are skipped and their ids added to ``malformed``."""
    states = "state=0" if only_unclaimed else "state IN (0,1,2)"
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS}, rank FROM jb_job WHERE board=? AND {states} AND (rank, seq) > (?, ?)"
        f" ORDER BY rank, seq LIMIT {PAGE}", (scope.board, *after)).fetchall()
    listed = []
    for row in rows:
        try:
            job = to_job(row)
        except MalformedEntry:
            malformed.append(job_id(row[0]))
            continue
        listed.append(ListedJob(job, STATES[row[1]], row[7] if row[1] == CLAIMED else None))
    return listed, ((rows[-1][9], rows[-1][0]) if len(rows) == PAGE else None)


def malformed_ids(conn: sqlite3.Connection, scope: Scope) -> list[str]:
    return [job_id(seq) for (seq,) in conn.execute("SELECT seq FROM jb_job WHERE board=? AND state=9",
                                                   (scope.board,))]


def state(conn: sqlite3.Connection, scope: Scope, job: str, now: float) -> JobState:
    seq = seq_of(job)
    row = None if seq is None else conn.execute(
        f"SELECT state, state=3 AND {LIVE_TRASH} FROM jb_job WHERE board=? AND seq=?",
        (scope.trash_ttl, scope.trash_ttl, now, scope.board, seq)).fetchone()
    if row is None:
        return JobState.COMPLETE
    if row[0] == TRASHED:
        return JobState.TRASHED if row[1] else JobState.COMPLETE
    return STATES.get(row[0], JobState.COMPLETE)


def owner(conn: sqlite3.Connection, scope: Scope, job: str) -> str | None:
    seq = seq_of(job)
    row = None if seq is None else conn.execute(
        "SELECT owner FROM jb_job WHERE board=? AND seq=? AND state=1", (scope.board, seq)).fetchone()
    return None if row is None else str(row[0])


def job_count(conn: sqlite3.Connection, scope: Scope) -> int:
    return int(conn.execute("SELECT count(*) FROM jb_job WHERE board=? AND state IN (0,1,2)",
                            (scope.board,)).fetchone()[0])


def trashed(conn: sqlite3.Connection, scope: Scope, now: float, after: tuple[float, int],
            malformed: list[str]) -> tuple[list[TrashedJob], tuple[float, int] | None]:
    """One page of the trash, oldest first."""
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS}, reason, trashed_at FROM jb_job WHERE board=? AND state=3 AND {LIVE_TRASH}"
        f" AND (trashed_at, seq) > (?, ?) ORDER BY trashed_at, seq LIMIT {PAGE}",
        (scope.board, scope.trash_ttl, scope.trash_ttl, now, *after)).fetchall()
    items = []
    for row in rows:
        try:
            items.append(TrashedJob(to_job(row), row[9], row[10]))
        except MalformedEntry:
            malformed.append(job_id(row[0]))
    return items, ((rows[-1][10], rows[-1][0]) if len(rows) == PAGE else None)


def outcome(conn: sqlite3.Connection, scope: Scope, job: str, now: float) -> Outcome | None:
    """How the job ended, or ``None`` while it is on the board."""
    seq = seq_of(job)
    if seq is None:
        return Outcome(job, JobState.COMPLETE)
    row = conn.execute(f"SELECT state, reason, state=3 AND {LIVE_TRASH} FROM jb_job WHERE board=? AND seq=?",
                       (scope.trash_ttl, scope.trash_ttl, now, scope.board, seq)).fetchone()
    if row is not None and row[0] in (UNCLAIMED, CLAIMED, WAITING):
        return None
    if row is not None and row[0] == TRASHED and row[2]:
        return Outcome(job, JobState.TRASHED, reason=row[1])
    kept = conn.execute(f"SELECT result FROM jb_result WHERE board=? AND seq=? AND {LIVE_RESULT}",
                        (scope.board, seq, scope.result_ttl, scope.result_ttl, now)).fetchone()
    return Outcome(job, JobState.COMPLETE, result=None if kept is None else decode_value(kept[0]))


@dataclass(slots=True)
class Claimable:
    """What ``wait`` looks at: the first claimable jobs in board order; when there are none, when the next
    delayed job (or rate permit) is due, and whether flow control holds back jobs that are ready."""

    jobs: list[Job]
    due: float | None = None
    held: bool = False


def claimable(conn: sqlite3.Connection, scope: Scope, names: Collection[str] | None, now: float,
              malformed: list[str], limit: int = 100) -> Claimable:
    """The jobs a claim could take now (none that flow control holds back): see :class:`Claimable`."""
    condition, params = name_filter(names)
    gate = flow.gate(conn, scope)
    held, held_params = ("1", []) if gate is None else gate.condition()
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jb_job WHERE board=? AND state=0 AND (not_before IS NULL OR not_before<=?)"
        f" AND {condition} AND {held} ORDER BY rank, seq LIMIT {limit}", (scope.board, now, *params, *held_params))
    jobs = []
    for row in rows.fetchall():
        try:
            jobs.append(to_job(row))
        except MalformedEntry:
            malformed.append(job_id(row[0]))
    if jobs:
        return Claimable(jobs)
    due = conn.execute(f"SELECT min(not_before) FROM jb_job WHERE board=? AND state=0 AND not_before>? AND {condition}",
                       (scope.board, now, *params)).fetchone()[0]
    if gate is None:
        return Claimable([], due)
    permit = gate.next_permit()
    if permit is not None:
        due = min(due if due is not None else math.inf, now + permit)
    ready = conn.execute(f"SELECT 1 FROM jb_job WHERE board=? AND state=0 AND (not_before IS NULL OR not_before<=?)"
                         f" AND {condition} LIMIT 1", (scope.board, now, *params)).fetchone()
    return Claimable([], due, ready is not None)


def lost_because(conn: sqlite3.Connection, scope: Scope, claim: Claim) -> str | None:
    """Why ``claim`` is not current any more, or ``None`` while it is."""
    seq = seq_of(claim.job.id)
    row: Any = None if seq is None else conn.execute(
        "SELECT state, gen FROM jb_job WHERE board=? AND seq=?", (scope.board, seq)).fetchone()
    if row is None:
        return "consumed"
    if row[0] == TRASHED:
        return "trashed"
    if row[1] != claim.generation:
        return "claimed again" if row[0] == CLAIMED else "released"
    return None if row[0] == CLAIMED else "released"


def entities(conn: sqlite3.Connection, scope: Scope) -> list[Entity]:
    rows = conn.execute("SELECT name, metadata FROM jb_entity WHERE board=? ORDER BY name", (scope.board,))
    return [Entity(name, decode_value(metadata)) for name, metadata in rows]


def last_seq(conn: sqlite3.Connection, scope: Scope) -> int:
    return int(conn.execute("SELECT last_seq FROM jb_board WHERE id=?", (scope.board,)).fetchone()[0])
