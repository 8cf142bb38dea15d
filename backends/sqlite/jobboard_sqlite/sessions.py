"""Sessions, waiting sessions and the event log (each function inside its caller's transaction).

A session row names its lock file; its claims name the session. A session found dead (its lock could be
taken, its file is gone, or its heartbeat is older than the session timeout) is ended by whoever found
it: its claims go back on the board (attempts stay counted, the next claim's generation is higher),
its entities go, its row goes.

Waking one claimer: a board with nothing to claim marks its session ``waiting`` (with the names it
wants) in the transaction that found nothing. A write that makes a job claimable pops the oldest
waiting session that wants the job's name (one per job) and, after its commit, rings that session's
doorbell; nobody else hears of it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Collection

from jobboard.job import wanted
from jobboard_sqlite import writes
from jobboard_sqlite.rows import Effects, Scope

EVENTS_KEPT = 20000
"""Rows of the event log kept per file (older ones are deleted by the sweep)."""


def board_id(conn: sqlite3.Connection, name: str, create: bool = True) -> int | None:
    """The board's id (the board made if missing and ``create``; else ``None`` when there is none)."""
    if create:
        conn.execute("INSERT OR IGNORE INTO jb_board(name) VALUES (?)", (name,))
    row = conn.execute("SELECT id FROM jb_board WHERE name=?", (name,)).fetchone()
    return None if row is None else int(row[0])


def start(conn: sqlite3.Connection, board: int, session: str, lock_path: str, addr: bytes,
          entities: dict[str, bytes]) -> None:
    """Write a new session's row and register ``entities`` (name: encoded metadata) again under it (those
    of the session it replaces, ended with it)."""
    conn.execute("INSERT INTO jb_session(id, board, pid, started, lock_path, addr) VALUES (?,?,?,?,?,?)",
                 (session, board, os.getpid(), time.time(), lock_path, addr))
    conn.executemany("INSERT OR REPLACE INTO jb_entity(board, name, session, metadata) VALUES (?,?,?,?)",
                     [(board, name, session, encoded) for name, encoded in entities.items()])


def alive(conn: sqlite3.Connection, scope: Scope) -> bool:
    return conn.execute("SELECT 1 FROM jb_session WHERE id=?", (scope.session,)).fetchone() is not None


def end(conn: sqlite3.Connection, scope: Scope, session: str, why: str, fx: Effects) -> bool:
    """End ``session``: release its claims (``why`` with the owner: ``"owner {} closed its board"``),
    drop its entities and its row. Returns whether the row was there."""
    held = conn.execute("SELECT seq, owner FROM jb_job WHERE session=? AND state=1", (session,)).fetchall()
    for seq, owner in held:
        writes.release(conn, scope, seq, None, why.format(owner), fx)
    conn.execute("DELETE FROM jb_entity WHERE session=?", (session,))
    return conn.execute("DELETE FROM jb_session WHERE id=?", (session,)).rowcount > 0


def others(conn: sqlite3.Connection, scope: Scope) -> list[str]:
    """The ids of the other sessions of this board (their lock files are ``<id>.lock`` in the directory beside
    the database, wherever each process sees it: the row's ``lock_path`` is its owner's view, for humans)."""
    return [row[0] for row in conn.execute("SELECT id FROM jb_session WHERE board=? AND id!=?",
                                           (scope.board, scope.session))]


def set_waiting(conn: sqlite3.Connection, scope: Scope, names: Collection[str] | None) -> float:
    """Mark this session waiting for ``names`` (``None``: every job not internal); return the mark."""
    listed = None if names is None else json.dumps(sorted(set(names)))
    mark = time.time()
    conn.execute("UPDATE jb_session SET waiting=?, names=? WHERE id=?", (mark, listed, scope.session))
    return mark


def clear_waiting(conn: sqlite3.Connection, scope: Scope, mark: float) -> None:
    """Clear this session's waiting mark if it is still ``mark`` (not popped, not set again since)."""
    conn.execute("UPDATE jb_session SET waiting=NULL WHERE id=? AND waiting=?", (scope.session, mark))


def finish(conn: sqlite3.Connection, scope: Scope, fx: Effects) -> None:
    """The last step of every write: pop one waiting session per job made claimable, log the events."""
    if fx.ready:
        _pop_waiters(conn, scope, fx)
    for session in fx.poked - {scope.session}:
        row = conn.execute("SELECT addr FROM jb_session WHERE id=?", (session,)).fetchone()
        if row is not None:
            fx.wake.append((session, row[0]))
    if fx.events and scope.log_events:
        conn.executemany(
            "INSERT INTO jb_event(board, session, kind, job, detail) VALUES (?,?,?,?,?)",
            [(scope.board, scope.session, e.kind.value, e.job_id, e.detail) for e in fx.events])


def _pop_waiters(conn: sqlite3.Connection, scope: Scope, fx: Effects) -> None:
    waiting = conn.execute(
        "SELECT id, addr, names FROM jb_session WHERE board=? AND waiting IS NOT NULL ORDER BY waiting LIMIT 64",
        (scope.board,)).fetchall()
    if not waiting:
        return
    left = [(session, addr, None if names is None else set(json.loads(names))) for session, addr, names in waiting]
    for name in fx.ready:
        for index, (session, addr, names) in enumerate(left):
            if wanted(name, names):
                fx.wake.append((session, addr))
                del left[index]
                break
        if not left:
            break
    if fx.wake:
        conn.executemany("UPDATE jb_session SET waiting=NULL WHERE id=?", [(s,) for s, _ in fx.wake])


def events_after(conn: sqlite3.Connection, scope: Scope,
                 after: int) -> tuple[int | None, int | None, list[tuple[int, str, str, str | None, str]]]:
    """The oldest and newest ids in the file's log (every board's), and up to :data:`EVENTS_READ` events of this
    board logged after id ``after`` (``id, session, kind, job, detail``), in one read transaction. Ids are the
    log's rowids: only :func:`prune_events` leaves gaps, so an oldest id past ``after + 1`` says events after
    ``after`` were pruned before this reader read them."""
    oldest, newest = conn.execute("SELECT min(id), max(id) FROM jb_event").fetchone()
    rows = conn.execute("SELECT id, session, kind, job, detail FROM jb_event WHERE board=? AND id>? ORDER BY id"
                        " LIMIT ?", (scope.board, after, EVENTS_READ)).fetchall()
    return oldest, newest, rows


EVENTS_READ = 5000
"""Events one read of the log returns at most."""


OBSERVED_FOR = 10.0
"""Seconds one refresh of a subscription keeps the writers of a board logging their events."""


def observe(conn: sqlite3.Connection, scope: Scope) -> None:
    """Ask every session of the board to log its events for the next :data:`OBSERVED_FOR` seconds."""
    conn.execute("UPDATE jb_board SET observed_until=? WHERE id=?", (time.time() + OBSERVED_FOR, scope.board))


def observed(conn: sqlite3.Connection, scope: Scope) -> bool:
    row = conn.execute("SELECT observed_until FROM jb_board WHERE id=?", (scope.board,)).fetchone()
    return row is not None and row[0] > time.time()


def prune_events(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM jb_event WHERE id < (SELECT max(id) FROM jb_event) - ?", (EVENTS_KEPT,))


def register_entity(conn: sqlite3.Connection, scope: Scope, name: str, encoded: bytes) -> None:
    conn.execute("INSERT OR REPLACE INTO jb_entity(board, name, session, metadata) VALUES (?,?,?,?)",
                 (scope.board, name, scope.session, encoded))


def unregister_entity(conn: sqlite3.Connection, scope: Scope, name: str) -> None:
    conn.execute("DELETE FROM jb_entity WHERE board=? AND name=? AND session=?", (scope.board, name, scope.session))
