"""The tables of a ``sqlite://`` file (every board of the file shares them, keyed by board id).

Job states: 0 unclaimed, 1 claimed, 2 waiting for dependencies, 3 trashed, 9 malformed (skipped).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path

from jobboard_sqlite import flow, grants

SCHEMA_VERSION = 4
"""1: the first; 2: flow control (:mod:`~jobboard_sqlite.flow`); 3: a rate's grants in a ring of ``count``
slots, not a log (``jb_grant``); 4: a settled key's own expiry (``jb_key.expires``). An older file is upgraded in
place."""
UPGRADE_3_TO_4 = ("ALTER TABLE jb_key ADD COLUMN expires REAL",
                  "CREATE INDEX IF NOT EXISTS jb_key_expires ON jb_key(board, expires) WHERE expires IS NOT NULL")
"""Version 3 processes go on on a version 4 file: the keys they settle get no expiry, and are swept by the
sweeping board's ``key_retention`` as before."""
BREAKS_RUNNING = frozenset({2})
"""The versions whose processes cannot go on once their file is upgraded (2: its rate's grants were a log): such a
file is upgraded only while no session of it is alive. A process of this jobboard checks the version in every write
transaction, and stops writing (``BoardConflict``) on a file upgraded under it."""
PAGE_SIZE = 1024
"""Bytes per page of a new file: every commit appends the pages it touched to the WAL, so small pages
keep the WAL's write volume (and its growth while a reader starves the checkpoints) small."""

UNCLAIMED, CLAIMED, WAITING, TRASHED, MALFORMED = 0, 1, 2, 3, 9

DDL = """
CREATE TABLE IF NOT EXISTS jb_board(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, last_seq INTEGER NOT NULL DEFAULT 0,
    observed_until REAL NOT NULL DEFAULT 0, flow INTEGER NOT NULL DEFAULT 0, paused INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jb_session(
    id TEXT PRIMARY KEY, board INTEGER NOT NULL, pid INTEGER NOT NULL, started REAL NOT NULL,
    lock_path TEXT NOT NULL, addr BLOB, waiting REAL, names TEXT);
CREATE INDEX IF NOT EXISTS jb_session_waiting ON jb_session(board, waiting) WHERE waiting IS NOT NULL;
CREATE TABLE IF NOT EXISTS jb_job(
    board INTEGER NOT NULL, seq INTEGER NOT NULL, rank INTEGER NOT NULL, name TEXT NOT NULL,
    state INTEGER NOT NULL, not_before REAL, attempts INTEGER NOT NULL DEFAULT 0,
    gen INTEGER NOT NULL DEFAULT 0, owner TEXT, session TEXT, waiting INTEGER NOT NULL DEFAULT 0,
    posting BLOB NOT NULL, progress BLOB, reason TEXT, trashed_at REAL, trash_ttl REAL,
    max_attempts INTEGER, keep INTEGER NOT NULL DEFAULT 0, result_ttl REAL, key TEXT,
    deps INTEGER NOT NULL DEFAULT 0, dependents INTEGER NOT NULL DEFAULT 0, grp TEXT,
    PRIMARY KEY(board, seq));
CREATE INDEX IF NOT EXISTS jb_job_ready ON jb_job(board, rank, seq) WHERE state = 0;
CREATE INDEX IF NOT EXISTS jb_job_session ON jb_job(session) WHERE state = 1;
CREATE INDEX IF NOT EXISTS jb_job_trash ON jb_job(board, trashed_at) WHERE state = 3;
CREATE TABLE IF NOT EXISTS jb_dep(
    board INTEGER NOT NULL, job INTEGER NOT NULL, dep INTEGER NOT NULL, result BLOB,
    PRIMARY KEY(board, job, dep));
CREATE INDEX IF NOT EXISTS jb_dep_dep ON jb_dep(board, dep);
CREATE TABLE IF NOT EXISTS jb_result(
    board INTEGER NOT NULL, seq INTEGER NOT NULL, result BLOB NOT NULL, kept_at REAL NOT NULL, ttl REAL,
    PRIMARY KEY(board, seq));
CREATE TABLE IF NOT EXISTS jb_key(
    board INTEGER NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, settled_at REAL, settled BLOB,
    settled_attempts INTEGER, expires REAL, PRIMARY KEY(board, key));
CREATE INDEX IF NOT EXISTS jb_key_settled ON jb_key(board, settled_at) WHERE settled_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jb_key_expires ON jb_key(board, expires) WHERE expires IS NOT NULL;
CREATE TABLE IF NOT EXISTS jb_entity(
    board INTEGER NOT NULL, name TEXT NOT NULL, session TEXT NOT NULL, metadata BLOB NOT NULL,
    PRIMARY KEY(board, name));
CREATE TABLE IF NOT EXISTS jb_event(
    id INTEGER PRIMARY KEY, board INTEGER NOT NULL, session TEXT NOT NULL, kind TEXT NOT NULL,
    job TEXT, detail TEXT NOT NULL);
"""


def connect(path: str, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, no busy handler (the caller
    retries) and no automatic checkpoint (each board checkpoints on its own thread, see runtime).

    :raises sqlite3.Error: the file cannot be opened, is not a database, or is read-only.
    """
    conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    try:
        refuse_foreign(conn)  # before any PRAGMA that writes: another program's file is left as it was
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # takes effect on a new file only
        mode = switch_to_wal(conn)
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"journal_mode is {mode}, not wal (is the directory writable?)")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA journal_size_limit=67108864")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version in BREAKS_RUNNING:
                refuse_while_running(conn, version)
            _make_or_upgrade(conn, version)
            conn.execute("COMMIT")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"schema version {version}, this jobboard knows {SCHEMA_VERSION}")
        conn.execute("PRAGMA busy_timeout=0")
    except BaseException:
        conn.close()
        raise
    return conn


def switch_to_wal(conn: sqlite3.Connection, within: float = 10.0) -> str:
    """``PRAGMA journal_mode=WAL`` (it needs the file to itself), tried again while other processes opening the
    new file at the same moment hold it: SQLite answers "database is locked" there without its busy handler."""
    deadline = time.monotonic() + within
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def refuse_foreign(conn: sqlite3.Connection) -> None:
    """A file with tables but no ``jb_board``, or with none and a schema version (a board always has tables), is
    another program's database: refused before anything is written.

    :raises sqlite3.DatabaseError: saying so (a permanent ``BoardConflict`` for the caller)."""
    # one statement, one snapshot: another process making the board commits its tables and version at once
    version, names = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version), (SELECT group_concat(name, char(10)) FROM "
        "(SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name))").fetchone()
    tables = names.split("\n") if names else []
    if tables and "jb_board" not in tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise sqlite3.DatabaseError(f"a SQLite database but not a jobboard board (its tables: {shown})")
    if not tables and version:
        raise sqlite3.DatabaseError(f"a SQLite database but not a jobboard board (no table, user_version {version})")


def refuse_while_running(conn: sqlite3.Connection, version: int) -> None:
    """(In the opening's write transaction.) Refuse to upgrade a version ``version`` file while a session of it is
    alive (its lock file held: see :mod:`~jobboard_sqlite.files`), naming the processes.

    :raises sqlite3.DatabaseError: saying so (a permanent ``BoardConflict`` for the caller)."""
    here = Path(conn.execute("PRAGMA database_list").fetchone()[2])  # the file as this process sees it
    rows = conn.execute("SELECT id, pid, lock_path FROM jb_session")
    alive = sorted({int(pid) for session, pid, stored in rows if held(lock_seen_here(here, session, stored))})
    if alive:
        raise sqlite3.DatabaseError(
            f"schema version {version} is open in {len(alive)} process(es) of an older jobboard (pid "
            f"{', '.join(map(str, alive))}) that cannot run on version {SCHEMA_VERSION}: stop them to upgrade it")


def lock_seen_here(db: Path, session: str, stored: str) -> str:
    """A session's lock file as this process sees it: beside ``db`` (in ``<db>-jobboard``, where every version
    makes them), not at the path its owner stored (another mount namespace, a container's volume, a bind mount
    name it otherwise); the stored path only when there is no such file here."""
    beside = db.with_name(db.name + "-jobboard") / f"{session}.lock"
    return str(beside) if beside.exists() else stored


def held(lock_path: str) -> bool:
    """Whether a session's lock file is held (``flock`` needs no write access); a file that cannot be opened counts
    as held (its owner may be alive), a missing one as not."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # drops the lock taken, if any
    return False


def _make_or_upgrade(conn: sqlite3.Connection, version: int) -> None:
    """(In the opening's write transaction.) The tables of a new file, or an older version's upgrade."""
    if version not in (0, 1, 2, 3):
        return  # a newer file (or not ours): refused by the caller
    statements = {0: (DDL + flow.DDL).split(";"), 1: [*flow.UPGRADE_1_TO_2, *flow.DDL.split(";"), *UPGRADE_3_TO_4],
                  2: [*flow.UPGRADE_2_TO_3, *flow.DDL.split(";"), *UPGRADE_3_TO_4], 3: UPGRADE_3_TO_4}[version]
    for statement in statements:
        if statement.strip():
            conn.execute(statement)
    if version == 2:
        grants.upgrade_grants(conn)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def inject(path: Path, board: int, raw: bytes) -> None:
    """Test hook: store ``raw`` as the posting of a new job of ``board`` (a connection of its own)."""
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        (seq,) = conn.execute("UPDATE jb_board SET last_seq=last_seq+1 WHERE id=? RETURNING last_seq",
                              (board,)).fetchone()
        conn.execute("INSERT INTO jb_job(board, seq, rank, name, state, posting) VALUES (?,?,2,'?',0,?)",
                     (board, seq, raw))
        conn.execute("COMMIT")
    finally:
        conn.close()
