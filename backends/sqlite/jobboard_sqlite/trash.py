"""The trash, idempotency keys and retention (each function inside its caller's transaction).

A trashed job keeps its row (state 3) with its reason and time, so ``requeue`` puts it back with its id
and place. A kept result, a trash entry and a settled key carry their expiry from when they were written (the
post's own ttl, else the writing board's ``result_ttl`` / ``trash_ttl`` / ``key_retention``), so a board opened with
shorter ones drops nobody else's. Expired ones are hidden from every read at once and deleted by :func:`sweep`,
which each board runs now and then (rows of an older version, with no expiry, go by the reading board's options).
"""

from __future__ import annotations

import sqlite3

from jobboard.backend import EventKind, Job, decode_posting, encode_posting
from jobboard.errors import InvalidJob, JobNotFound
from jobboard_sqlite import grants
from jobboard_sqlite.rows import JOB_COLUMNS, Effects, Scope, job_id, seq_of, to_job
from jobboard_sqlite.schema import TRASHED

LIVE_TRASH = "(COALESCE(trash_ttl, ?) = 0 OR trashed_at + COALESCE(trash_ttl, ?) > ?)"
"""A trash row not expired yet (parameters: the board's trash_ttl twice, now)."""
LIVE_RESULT = "(COALESCE(ttl, ?) = 0 OR kept_at + COALESCE(ttl, ?) > ?)"


def keyed(conn: sqlite3.Connection, scope: Scope, key: str, now: float) -> Job | None:
    """The job ``key`` still finds: on the board, or settled and not expired (``key_retention`` of the board that
    settled it)."""
    row = conn.execute("SELECT seq, settled_at, settled, settled_attempts, expires FROM jb_key WHERE board=? AND key=?",
                       (scope.board, key)).fetchone()
    if row is None:
        return None
    seq, settled_at, settled, attempts, expires = row
    if settled_at is None:
        job = conn.execute(f"SELECT {JOB_COLUMNS} FROM jb_job WHERE board=? AND seq=? AND state IN (0,1,2)",
                           (scope.board, seq)).fetchone()
        return to_job(job) if job is not None else None
    expired_trash = conn.execute(f"SELECT 1 FROM jb_job WHERE board=? AND seq=? AND state=3 AND NOT {LIVE_TRASH}",
                                 (scope.board, seq, scope.trash_ttl, scope.trash_ttl, now)).fetchone()
    if expires is None:
        expires = settled_at + scope.key_retention  # settled by a version 3 process
    if now < expires and expired_trash is None:
        return decode_posting(settled, (attempts, None)).to_job(job_id(seq), seq)
    conn.execute("DELETE FROM jb_key WHERE board=? AND key=?", (scope.board, key))
    return None


def settle_key(conn: sqlite3.Connection, scope: Scope, key: str | None, seq: int, raw: bytes, attempts: int,
               now: float) -> None:
    """The key of a job leaving the board keeps finding it, as it was, for this board's ``key_retention``."""
    if key is not None:
        conn.execute("UPDATE jb_key SET settled_at=?, settled=?, settled_attempts=?, expires=? WHERE board=? AND key=?"
                     " AND seq=?", (now, raw, attempts, now + scope.key_retention, scope.board, key, seq))


def move_to_trash(conn: sqlite3.Connection, scope: Scope, seq: int, reason: str, now: float, fx: Effects) -> None:
    """Trash a job and, recursively, every job waiting for it."""
    name, raw, attempts, session = conn.execute(
        "SELECT name, posting, attempts, session FROM jb_job WHERE board=? AND seq=?", (scope.board, seq)).fetchone()
    try:
        posting = decode_posting(raw)
        key, ttl = posting.key, posting.trash_ttl
    except Exception:  # noqa: BLE001 (a malformed row is trashed all the same)
        key, ttl = None, None
    if ttl is None:
        ttl = scope.trash_ttl  # fixed now: a board with a shorter trash_ttl does not drop it sooner
    if session is not None and session != scope.session:
        fx.poked.add(session)
    conn.execute("UPDATE jb_job SET state=3, owner=NULL, session=NULL, progress=NULL, reason=?, trashed_at=?,"
                 " trash_ttl=? WHERE board=? AND seq=?", (reason, now, ttl, scope.board, seq))
    settle_key(conn, scope, key, seq, raw, attempts, now)
    fx.event(EventKind.TRASHED, job_id(seq), reason)
    dependents = conn.execute(
        "SELECT d.job FROM jb_dep d JOIN jb_job j ON j.board=d.board AND j.seq=d.job"
        " WHERE d.board=? AND d.dep=? AND j.state IN (0,1,2)", (scope.board, seq)).fetchall()
    for (dependent,) in dependents:
        cause = f"dependency {job_id(seq)} ({name}) was trashed: {reason}"
        move_to_trash(conn, scope, dependent, cause, now, fx)


def drop_trashed(conn: sqlite3.Connection, board: int, seqs: list[int]) -> None:
    """Forget trashed jobs: their rows, links and the keys that find them."""
    for seq in seqs:
        conn.execute("DELETE FROM jb_job WHERE board=? AND seq=? AND state=3", (board, seq))
        conn.execute("DELETE FROM jb_dep WHERE board=? AND job=?", (board, seq))
        conn.execute("DELETE FROM jb_key WHERE board=? AND seq=?", (board, seq))


def purge(conn: sqlite3.Connection, scope: Scope, older_than: float, now: float) -> int:
    """Remove the trash entries trashed at least ``older_than`` seconds ago (expired ones first)."""
    sweep(conn, scope, now)
    seqs = [seq for (seq,) in conn.execute("SELECT seq FROM jb_job WHERE board=? AND state=3 AND trashed_at<=?",
                                           (scope.board, now - older_than))]
    drop_trashed(conn, scope.board, seqs)
    return len(seqs)


def sweep(conn: sqlite3.Connection, scope: Scope, now: float) -> int:
    """Delete expired kept results, trash entries and settled keys, and the grants of cleared rates; return how
    many results and trash entries."""
    results = conn.execute(f"DELETE FROM jb_result WHERE board=? AND NOT {LIVE_RESULT}",
                           (scope.board, scope.result_ttl, scope.result_ttl, now)).rowcount
    expired = [seq for (seq,) in conn.execute(
        f"SELECT seq FROM jb_job WHERE board=? AND state=3 AND NOT {LIVE_TRASH}",
        (scope.board, scope.trash_ttl, scope.trash_ttl, now))]
    drop_trashed(conn, scope.board, expired)
    grants.sweep(conn, scope.board, grants.clock())  # a cleared rate's grants, once its period is over
    conn.execute("DELETE FROM jb_key WHERE board=? AND expires<=?", (scope.board, now))
    conn.execute("DELETE FROM jb_key WHERE board=? AND expires IS NULL AND settled_at<=?",  # a version 3 process's
                 (scope.board, now - scope.key_retention))
    return results + len(expired)


def requeue(conn: sqlite3.Connection, scope: Scope, job: str, reset_attempts: bool, now: float,
            fx: Effects) -> Job:
    """Put a trashed job back, unclaimed, with its id and place. :raises JobNotFound: / :raises InvalidJob:"""
    seq = seq_of(job)
    row = None if seq is None else conn.execute(
        f"SELECT waiting, posting, attempts FROM jb_job WHERE board=? AND seq=? AND state=3 AND {LIVE_TRASH}",
        (scope.board, seq, scope.trash_ttl, scope.trash_ttl, now)).fetchone()
    if row is None or seq is None:
        raise JobNotFound(f"job {job} is not in the trash")
    waiting, raw, attempts = row
    if waiting:
        raise InvalidJob(f"job {job} waits for a dependency whose result never came (it was trashed with a "
                         "dependency): post it again instead")
    posting = decode_posting(raw, (0 if reset_attempts else attempts, None))
    if posting.key is not None:
        other = conn.execute("SELECT seq FROM jb_key WHERE board=? AND key=?", (scope.board, posting.key)).fetchone()
        if other is not None and other[0] != seq:
            posting = posting.without_key()
            raw = encode_posting(posting)
        else:
            conn.execute("INSERT OR REPLACE INTO jb_key(board, key, seq) VALUES (?,?,?)", (scope.board, posting.key, seq))
    conn.execute("UPDATE jb_job SET state=0, reason=NULL, trashed_at=NULL, trash_ttl=NULL, not_before=NULL,"
                 " attempts=?, posting=?, key=? WHERE board=? AND seq=?",
                 (posting.attempts, raw, posting.key, scope.board, seq))
    fx.ready.append(posting.name)
    fx.event(EventKind.POSTED, job, posting.name)
    return posting.to_job(job, seq)


__all__ = ["TRASHED", "drop_trashed", "keyed", "move_to_trash", "purge", "requeue", "settle_key", "sweep"]
