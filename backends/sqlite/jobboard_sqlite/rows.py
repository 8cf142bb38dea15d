"""What the SQL functions share: the board a call is about, what a write did, rows made into jobs.

Every function of :mod:`~jobboard_sqlite.writes`, :mod:`~jobboard_sqlite.trash` and
:mod:`~jobboard_sqlite.reads` runs on the connection's thread inside a transaction its caller opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from jobboard.backend import Event, EventKind, Job, Progress, decode_posting, decode_value, encode_value
from jobboard.job import INTERNAL_PREFIX

JOB_COLUMNS = "seq, state, attempts, not_before, posting, progress, gen, owner, session"


@dataclass(slots=True)
class Scope:
    """The board and session a call works for, and the reading board's retention options."""

    board: int
    session: str
    key_retention: float
    result_ttl: float
    trash_ttl: float
    log_events: bool = False
    """Whether writes log their events for the other sessions (someone reads them: ``observed_until``)."""
    gated: bool = False
    """Whether the board had a limit or a pause when this board last looked (its claims read the gate first)."""
    stored: Any = None
    """The limits and pauses as this board last read them, with the ``jb_board.flow`` they were read at."""


@dataclass(slots=True)
class Effects:
    """What one committed write did: the events to publish, the names of jobs that became claimable
    (or changed when they are due: one waiting session is woken per job), the sessions whose claims
    another session took away (woken so their ``watch_claim`` returns), and the malformed rows met."""

    events: list[Event] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    poked: set[str] = field(default_factory=set)
    malformed: list[str] = field(default_factory=list)
    wake: list[tuple[str, bytes]] = field(default_factory=list)
    """``(session, address)`` of the waiting sessions this write popped (filled at commit)."""

    def event(self, kind: EventKind, job_id: str, detail: str) -> None:
        self.events.append(Event(kind, job_id, detail))


class Sequences:
    """Hands out the board's job sequences in one transaction: one ``UPDATE ... RETURNING`` per post, or
    for a batch the counter read once and written back once (:meth:`close`)."""

    def __init__(self, conn: sqlite3.Connection, scope: Scope, batch: bool = False) -> None:
        self.conn, self.scope, self.batch = conn, scope, batch
        self.last: int | None = None

    def take(self) -> int:
        if not self.batch:
            return int(self.conn.execute("UPDATE jb_board SET last_seq=last_seq+1 WHERE id=? RETURNING last_seq",
                                         (self.scope.board,)).fetchone()[0])
        if self.last is None:
            self.last = int(self.conn.execute("SELECT last_seq FROM jb_board WHERE id=?",
                                              (self.scope.board,)).fetchone()[0])
        self.last += 1
        return self.last

    def close(self) -> None:
        if self.batch and self.last is not None:
            self.conn.execute("UPDATE jb_board SET last_seq=? WHERE id=?", (self.last, self.scope.board))


def job_id(seq: int) -> str:
    return "job-%010d" % seq  # noqa: UP031 - a third cheaper than the f-string's format spec


def seq_of(job_id: str) -> int | None:
    """The sequence of a well-formed id (``job-`` and ten digits or more), else ``None``."""
    digits = job_id[4:]
    if job_id.startswith("job-") and len(digits) >= 10 and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


def to_job(row: sqlite3.Row | tuple[Any, ...]) -> Job:
    """A :data:`JOB_COLUMNS` row as a job. :raises MalformedEntry: its posting is not one."""
    seq, state, attempts, not_before, raw, progress = row[0], row[1], row[2], row[3], row[4], row[5]
    job = decode_posting(raw, (attempts, not_before)).to_job(job_id(seq), seq)
    if progress is not None and state == 1:
        fraction, note, at = decode_value(progress)
        return _with_progress(job, Progress(fraction, note, at))
    return job


def _with_progress(job: Job, progress: Progress) -> Job:
    from dataclasses import replace
    return replace(job, progress=progress)


def encode_progress(progress: Progress) -> bytes:
    return encode_value([progress.fraction, progress.note, progress.at], what="progress")


def name_filter(names: Collection[str] | None) -> tuple[str, list[Any]]:
    """The SQL condition (and its parameters) of ``wanted(name, names)``."""
    if names is None:
        return "substr(name, 1, ?) != ?", [len(INTERNAL_PREFIX), INTERNAL_PREFIX]
    listed = sorted(set(names))
    if not listed:
        return "0", []
    return f"name IN ({','.join('?' * len(listed))})", listed
