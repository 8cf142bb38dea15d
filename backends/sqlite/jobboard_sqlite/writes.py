"""Posts, claims and settles: each function runs inside one ``BEGIN IMMEDIATE`` transaction.

The fence: a settle, a progress report or a cancel reads the job's ``state``, ``gen`` and ``owner`` in
the transaction that writes it, so a stale claim (settled, released or claimed again since) raises
``ClaimLost`` and changes nothing (the transaction is rolled back).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Collection, Sequence
from typing import Any

from jobboard.backend import (
    Claim,
    Event,
    EventKind,
    Job,
    MalformedEntry,
    Prepared,
    Progress,
    Settle,
    SettleAction,
    decode_posting,
    decode_value,
    encode_posting,
)
from jobboard.errors import (
    AlreadyClaimed,
    ClaimLost,
    DependencyMissing,
    JobBoardError,
    JobNotFound,
    NotClaimable,
    NotOwner,
)
from jobboard.job import positional_constructor
from jobboard_sqlite import flow, passed, trash
from jobboard_sqlite.rows import (
    JOB_COLUMNS,
    Effects,
    Scope,
    Sequences,
    encode_progress,
    job_id,
    name_filter,
    seq_of,
    to_job,
)
from jobboard_sqlite.schema import CLAIMED, MALFORMED, UNCLAIMED, WAITING

MAX_ATTEMPTS_REASON = "max attempts exceeded"


INSERT_JOB = ("INSERT INTO jb_job(board, seq, rank, name, state, not_before, attempts, waiting, posting, max_attempts,"
              " keep, result_ttl, key, deps, grp) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")


def _job_row(scope: Scope, seq: int, prepared: Prepared, deps: int) -> tuple[Any, ...]:
    posting = prepared.posting
    return (scope.board, seq, posting.priority.rank, posting.name, WAITING if deps else UNCLAIMED,
            posting.not_before, posting.attempts, deps, prepared.raw, posting.max_attempts,
            int(posting.keep_result), posting.result_ttl, posting.key, deps, posting.group)


def post(conn: sqlite3.Connection, scope: Scope, prepared: Prepared, now: float, fx: Effects,
         sequences: Sequences | None = None) -> Job:
    """Write one posting, or return the job its key still finds.

    :raises DependencyMissing: a dependency is not on the board (nothing of this post written, but
        perhaps the deletion of its key's expired record).
    """
    posting = prepared.posting
    if posting.key is not None:
        found = trash.keyed(conn, scope, posting.key, now)
        if found is not None:
            return found
    deps = []
    for dep in posting.depends_on:
        seq = seq_of(dep)
        row = None if seq is None else conn.execute(
            "SELECT state FROM jb_job WHERE board=? AND seq=? AND state IN (0,1,2)", (scope.board, seq)).fetchone()
        if row is None:
            raise DependencyMissing.of(posting.name, dep)
        deps.append(seq)
    seq = (sequences or Sequences(conn, scope)).take()
    conn.execute(INSERT_JOB, _job_row(scope, seq, prepared, len(deps)))
    if deps:
        conn.executemany("INSERT INTO jb_dep(board, job, dep) VALUES (?,?,?)", [(scope.board, seq, d) for d in deps])
        conn.executemany("UPDATE jb_job SET dependents=dependents+1 WHERE board=? AND seq=?",
                         [(scope.board, d) for d in deps])
    else:
        fx.ready.append(posting.name)
    if posting.key is not None:
        conn.execute("INSERT OR REPLACE INTO jb_key(board, key, seq) VALUES (?,?,?)", (scope.board, posting.key, seq))
    fx.event(EventKind.POSTED, job_id(seq), posting.name)
    return posting.to_job(job_id(seq), seq)


def post_batch(conn: sqlite3.Connection, scope: Scope, batch: Sequence[Prepared], now: float,
               fx: Effects) -> list[Job] | DependencyMissing:
    """Write a batch in order; a dependency missing stops it there: the error is *returned* (with its
    index and the jobs posted before it, which are committed). Postings without a key or dependencies
    are inserted together (one ``executemany`` of :data:`INSERT_PLAIN`), before any posting that has one
    (which may name them)."""
    posted: list[Job] = []
    plain: list[tuple[Any, ...]] = []
    sequences = Sequences(conn, scope, batch=True)
    take, board, ready, events, posted_kind = sequences.take, scope.board, fx.ready, fx.events, EventKind.POSTED
    try:
        for index, prepared in enumerate(batch):
            posting = prepared.posting
            if posting.key is None and not posting.depends_on:
                seq, name = take(), posting.name
                not_before, max_attempts, result_ttl, group = (
                    posting.not_before, posting.max_attempts, posting.result_ttl, posting.group)
                plain.append((board, seq, posting.priority.rank, name, "" if not_before is None else not_before,
                              posting.attempts, bytearray(prepared.raw), "" if max_attempts is None else max_attempts,
                              int(posting.keep_result), "" if result_ttl is None else result_ttl,
                              "" if group is None else group))
                job = posting.to_job("job-%010d" % seq, seq)  # noqa: UP031 - rows.job_id, a third cheaper
                ready.append(name)
                events.append(_new_event(posted_kind, job.id, name, 0))
                posted.append(job)
                continue
            _insert(conn, plain)
            try:
                posted.append(post(conn, scope, prepared, now, fx, sequences))
            except DependencyMissing as error:
                return error.in_batch(index, posted)
        _insert(conn, plain)
    finally:
        sequences.close()
    return posted


INSERT_PLAIN = ("INSERT INTO jb_job(board, seq, rank, name, state, not_before, attempts, waiting, posting, max_attempts,"
                " keep, result_ttl, key, deps, grp) VALUES (?,?,?,?,0,nullif(?,''),?,0,?,nullif(?,''),?,nullif(?,''),"
                "NULL,0,nullif(?,''))")
"""An unclaimed posting without a key or dependencies. ``''`` stands for NULL and the posting is bound as a
``bytearray``: ``sqlite3`` looks ``None`` and ``bytes`` up among its adapters (half the client's cost of a row)."""
_new_event = positional_constructor(Event)


def _insert(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        conn.executemany(INSERT_PLAIN, rows)
        rows.clear()


def claim(conn: sqlite3.Connection, scope: Scope, seq: int | None, owner: str, now: float,
          fx: Effects) -> Claim | JobNotFound:
    """Claim one job; a job past its attempts goes to the trash and the error is *returned* (the trash
    is committed, then raised). :raises JobNotFound: / :raises NotClaimable: / :raises AlreadyClaimed:"""
    row = None if seq is None else conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jb_job WHERE board=? AND seq=? AND state IN (0,1,2,9)",
        (scope.board, seq)).fetchone()
    if row is None or seq is None:
        raise JobNotFound(f"job {'?' if seq is None else job_id(seq)} is not on the board")
    if row[1] == MALFORMED:
        fx.malformed.append(job_id(seq))
        raise JobNotFound(f"job {job_id(seq)} is not a valid posting")
    if row[1] == WAITING:
        raise NotClaimable(f"job {job_id(seq)} is waiting for its dependencies")
    if row[1] == CLAIMED:
        raise AlreadyClaimed(f"job {job_id(seq)} is claimed by {row[7]}")
    if row[3] is not None and row[3] > now:
        raise NotClaimable(f"job {job_id(seq)} is delayed for {row[3] - now:.1f}s")
    gate = flow.gate(conn, scope)
    if gate is not None:
        name, group = conn.execute("SELECT name, grp FROM jb_job WHERE board=? AND seq=?", (scope.board, seq)).fetchone()
        refusal = gate.refusal(seq, name, group)
        if refusal is not None:
            raise refusal
    return _take(conn, scope, row, owner, now, fx, gate)


CLAIMED_COLUMNS = "seq, 1, attempts, NULL, posting, NULL, gen, max_attempts, deps, grp"
CLAIM_SET = "state=1, gen=gen+1, attempts=attempts+1, not_before=NULL, owner=?, session=?, progress=NULL"


def _take(conn: sqlite3.Connection, scope: Scope, row: Any, owner: str, now: float,
          fx: Effects, gate: flow.Gate | None) -> Claim | JobNotFound:
    """The claim of ``row`` (a checked, claimable job by id); past its attempts, the error."""
    seq, attempts = row[0], row[2]
    taken = conn.execute(f"UPDATE jb_job SET {CLAIM_SET} WHERE board=? AND seq=? RETURNING {CLAIMED_COLUMNS}",
                         (owner, scope.session, scope.board, seq)).fetchone()
    claimed = _claimed(conn, scope, taken, owner, now, fx)
    if claimed is None:
        return JobNotFound(
            f"job {job_id(seq)} used its {attempts} attempts and was moved to the trash, or is not a valid posting")
    if gate is not None:  # only a claim that was taken counts in its group's rate
        gate.granted(conn, scope, taken[9])
    return claimed


def _claimed(conn: sqlite3.Connection, scope: Scope, row: Any, owner: str, now: float,
             fx: Effects) -> Claim | None:
    """The claim of a row just updated to claimed; ``None`` (and the row trashed or set aside) when the job
    was past its attempts or its posting is not one."""
    seq, attempts, limit = row[0], row[2], row[7]
    if limit is not None and attempts > limit:
        conn.execute("UPDATE jb_job SET attempts=attempts-1 WHERE board=? AND seq=?", (scope.board, seq))
        trash.move_to_trash(conn, scope, seq, f"{MAX_ATTEMPTS_REASON} ({limit})", now, fx)
        return None
    try:
        job = to_job(row)
    except MalformedEntry:
        conn.execute("UPDATE jb_job SET state=? WHERE board=? AND seq=?", (MALFORMED, scope.board, seq))
        fx.malformed.append(job_id(seq))
        return None
    values: tuple[Any, ...] = ()
    if row[8]:
        results = dict(conn.execute("SELECT dep, result FROM jb_dep WHERE board=? AND job=?", (scope.board, seq)))
        values = tuple(decode_value(results[seq_of(d)]) for d in job.depends_on)
    fx.event(EventKind.CLAIMED, job.id, owner)
    return Claim(job, owner, row[6], values)


def claim_next(conn: sqlite3.Connection, scope: Scope, owner: str, names: Collection[str] | None,
               now: float, fx: Effects, whys: set[str] | None = None) -> Claim | None:
    """Claim the best claimable job (priority, then age) among ``names``; ``None`` if there is none.

    One ``UPDATE ... RETURNING`` of the first row of the ready index, in the session-alive check, when the
    board has no limit nor pause; else the same with the conditions of a :class:`~jobboard_sqlite.flow.Gate`
    read in the transaction (and the grant counted in its group's rate), ``whys`` (if given) gathering why the
    jobs it passed over were held back (:mod:`jobboard_sqlite.passed`).
    :raises SessionGone: this board's session was ended (a new one is started and the claim tried again).
    """
    condition, params = name_filter(names)
    while True:
        gate = flow.gate(conn, scope) if scope.gated else None
        row = None
        if gate is None:
            row = conn.execute(
                f"UPDATE jb_job SET {CLAIM_SET} WHERE board=? AND seq=(SELECT seq FROM jb_job WHERE board=? AND state=0"
                f" AND (not_before IS NULL OR not_before<=?) AND {condition} ORDER BY rank, seq LIMIT 1)"
                f" AND EXISTS (SELECT 1 FROM jb_session WHERE id=?) AND (SELECT flow FROM jb_board WHERE id=?)<=0"
                f" RETURNING {CLAIMED_COLUMNS}",
                (owner, scope.session, scope.board, scope.board, now, *params, scope.session, scope.board)).fetchone()
            gate = None if row is not None else flow.gate(conn, scope)
        if row is None and gate is not None:
            row = _claim_gated(conn, scope, owner, now, condition, params, gate, whys)
        if row is None:
            if not alive(conn, scope):
                raise SessionGone("session ended")
            if gate is not None and whys is not None:
                whys |= passed.without_claim(conn, passed.checks(gate), scope.board, now, condition, params)
            return None
        claimed = _claimed(conn, scope, row, owner, now, fx)
        if claimed is not None:
            if gate is not None:  # only a claim that was taken counts in its group's rate
                gate.granted(conn, scope, row[9])
            return claimed


def _claim_gated(conn: sqlite3.Connection, scope: Scope, owner: str, now: float, condition: str,
                 params: list[Any], gate: flow.Gate, whys: set[str] | None) -> Any:
    """The claim of the best job that ``gate`` does not hold back (its row), or ``None``; into ``whys`` (if
    given), why the better jobs it passed over were held back (read by the same statement)."""
    held, held_params = gate.condition()
    found, extra, extra_params = passed.returning(gate, scope.board, now, condition, params) if whys is not None \
        else ([], "", [])
    row = conn.execute(
        f"UPDATE jb_job SET {CLAIM_SET} WHERE board=? AND seq=(SELECT seq FROM jb_job WHERE board=? AND state=0"
        f" AND (not_before IS NULL OR not_before<=?) AND {condition} AND {held} ORDER BY rank, seq LIMIT 1)"
        f" AND EXISTS (SELECT 1 FROM jb_session WHERE id=?) RETURNING {CLAIMED_COLUMNS}{extra}",
        (owner, scope.session, scope.board, scope.board, now, *params, *held_params, scope.session,
         *extra_params)).fetchone()
    if row is not None and found and whys is not None:
        whys |= passed.whys(found, row[-len(found):])
    return row


def alive(conn: sqlite3.Connection, scope: Scope) -> bool:
    return conn.execute("SELECT 1 FROM jb_session WHERE id=?", (scope.session,)).fetchone() is not None


class SessionGone(JobBoardError):
    """This board's session was ended by another board (internal: a new session is started)."""


def current(conn: sqlite3.Connection, scope: Scope, claim: Claim) -> tuple[Any, ...]:
    """The claimed row of ``claim`` if it is current. :raises ClaimLost: / :raises NotOwner:"""
    seq = seq_of(claim.job.id)
    row = None if seq is None else conn.execute(
        "SELECT seq, state, gen, owner, posting, attempts, not_before, session FROM jb_job"
        " WHERE board=? AND seq=?", (scope.board, seq)).fetchone()
    if row is None or row[1] != CLAIMED or row[2] != claim.generation:
        raise ClaimLost(f"claim of job {claim.job.id} (generation {claim.generation}) is no longer current")
    if row[3] != claim.owner:
        raise NotOwner(f"job {claim.job.id} is owned by {row[3]}, not {claim.owner}")
    return tuple(row)


def settle(conn: sqlite3.Connection, scope: Scope, claim: Claim, request: Settle, now: float, fx: Effects) -> None:
    """Consume, abandon or trash ``claim``'s job, fenced (see the module docstring)."""
    if request.action is SettleAction.CONSUME:
        consume(conn, scope, claim, request.encoded_result, now, fx)
        return
    row = current(conn, scope, claim)
    seq = row[0]
    if row[7] != scope.session:
        fx.poked.add(row[7])
    if request.error is not None:
        posting = decode_posting(row[4]).failed(request.error)
        conn.execute("UPDATE jb_job SET posting=? WHERE board=? AND seq=?",
                     (encode_posting(posting), scope.board, seq))
    if request.action is SettleAction.ABANDON:
        not_before = now + request.retry_after if request.retry_after else None
        release(conn, scope, seq, not_before, f"abandoned by {claim.owner}", fx)
    else:
        trash.move_to_trash(conn, scope, seq, request.reason, now, fx)


def release(conn: sqlite3.Connection, scope: Scope, seq: int, not_before: float | None, why: str,
            fx: Effects) -> None:
    """Put a claimed job back on the board (its attempt stays counted)."""
    (name,) = conn.execute(
        "UPDATE jb_job SET state=0, owner=NULL, session=NULL, progress=NULL, not_before=?"
        " WHERE board=? AND seq=? RETURNING name", (not_before, scope.board, seq)).fetchone()
    fx.ready.append(name)
    fx.event(EventKind.RELEASED, job_id(seq), why)


def consume(conn: sqlite3.Connection, scope: Scope, claim: Claim, result: bytes, now: float, fx: Effects) -> None:
    """Remove the claimed job (one fenced ``DELETE ... RETURNING``); its result goes to its dependents (the
    last one makes a dependent claimable). :raises ClaimLost: / :raises NotOwner: nothing changed."""
    seq = seq_of(claim.job.id)
    row = None if seq is None else conn.execute(
        "DELETE FROM jb_job WHERE board=? AND seq=? AND state=1 AND gen=? AND owner=?"
        " RETURNING name, key, keep, result_ttl, deps, dependents, posting, attempts, session",
        (scope.board, seq, claim.generation, claim.owner)).fetchone()
    if row is None or seq is None:
        current(conn, scope, claim)  # raises why
        raise ClaimLost(f"claim of job {claim.job.id} is no longer current")
    name, key, keep, result_ttl, deps, dependents, raw, attempts, session = row
    if session != scope.session:
        fx.poked.add(session)
    if deps:
        conn.execute("DELETE FROM jb_dep WHERE board=? AND job=?", (scope.board, seq))
    trash.settle_key(conn, scope, key, seq, raw, attempts, now)
    if keep:
        conn.execute("INSERT OR REPLACE INTO jb_result(board, seq, result, kept_at, ttl) VALUES (?,?,?,?,?)",
                     (scope.board, seq, result, now, scope.result_ttl if result_ttl is None else result_ttl))
    fx.event(EventKind.CONSUMED, job_id(seq), name)
    if dependents:
        _deliver(conn, scope, seq, result, fx)


def _deliver(conn: sqlite3.Connection, scope: Scope, seq: int, result: bytes, fx: Effects) -> None:
    waiting = conn.execute("SELECT d.job FROM jb_dep d JOIN jb_job j ON j.board=d.board AND j.seq=d.job"
                           " WHERE d.board=? AND d.dep=? AND j.state=2", (scope.board, seq)).fetchall()
    for (dependent,) in waiting:
        conn.execute("UPDATE jb_dep SET result=? WHERE board=? AND job=? AND dep=?",
                     (result, scope.board, dependent, seq))
        left, name = conn.execute(
            "UPDATE jb_job SET waiting=waiting-1, state=CASE WHEN waiting=1 THEN 0 ELSE 2 END"
            " WHERE board=? AND seq=? RETURNING waiting, name", (scope.board, dependent)).fetchone()
        if left == 0:
            fx.ready.append(name)
            fx.event(EventKind.READY, job_id(dependent), name)


def unclaim(conn: sqlite3.Connection, scope: Scope, claim: Claim, fx: Effects) -> None:
    """Undo a claim no caller received (cancelled): back on the board, its attempt not counted."""
    with contextlib.suppress(ClaimLost, NotOwner):
        give_back(conn, scope, claim, f"claim by {claim.owner} cancelled", fx)


def give_back(conn: sqlite3.Connection, scope: Scope, claim: Claim, why: str, fx: Effects) -> None:
    """Back on the board, its attempt not counted (fenced). :raises ClaimLost: / :raises NotOwner:"""
    row = current(conn, scope, claim)
    conn.execute("UPDATE jb_job SET attempts=max(attempts-1, 0) WHERE board=? AND seq=?", (scope.board, row[0]))
    release(conn, scope, row[0], None, why, fx)


def report_progress(conn: sqlite3.Connection, scope: Scope, claim: Claim, progress: Progress) -> None:
    """Store ``progress`` with the claim, fenced like a settle."""
    row = current(conn, scope, claim)
    conn.execute("UPDATE jb_job SET progress=? WHERE board=? AND seq=?",
                 (encode_progress(progress), scope.board, row[0]))


def cancel(conn: sqlite3.Connection, scope: Scope, job: str, reason: str, now: float, fx: Effects) -> None:
    """Trash a job whoever holds it (its owner's session is woken). :raises JobNotFound:"""
    seq = seq_of(job)
    row = None if seq is None else conn.execute(
        "SELECT session FROM jb_job WHERE board=? AND seq=? AND state IN (0,1,2)", (scope.board, seq)).fetchone()
    if row is None or seq is None:
        raise JobNotFound(f"job {job} is not on the board")
    if row[0] is not None and row[0] != scope.session:
        fx.poked.add(row[0])
    trash.move_to_trash(conn, scope, seq, reason, now, fx)
