"""Flow control on a ``sqlite://`` board (issue 27; the rules: :mod:`jobboard.board.limits`).

Stored in the file, so every board of every process reads the same: ``jb_limit`` (a group's limit),
``jb_pause`` (paused names), ``jb_board.paused`` (the whole board) and ``jb_grant`` (the times of a
rated group's grants: a sliding window log on the host's ``CLOCK_MONOTONIC``, which every process of
the host shares). ``jb_board.flow`` is positive while the board has a limit or a pause, and takes a new
value at every change of them (negative or 0 while there is none): a claim on a board without any runs
the plain claim (one subquery more); otherwise it reads a :class:`Gate` first, the limits and pauses
from the board's cache while ``flow`` has not changed.

**One atomic step.** A claim reads its gate and claims in the same ``BEGIN IMMEDIATE`` transaction: the
file's write lock serializes them, so no two claimers take a group's last permit and a limit or pause
committed before a claim began is honoured by it. **A permit is a claim**: ``running`` is the count of
the group's claimed rows, read in that transaction; whatever ends a claim (a settle, a cancel, a
release by the reaper or the sweep, the board's close) returns the permit by the same write.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from jobboard.board.limits import GroupLimit, LimitSpec, Paused, Rate
from jobboard.errors import HeldBack
from jobboard_sqlite.rows import Effects, Scope, job_id

DDL = """
CREATE TABLE IF NOT EXISTS jb_limit(
    board INTEGER NOT NULL, grp TEXT NOT NULL, concurrency INTEGER, sequence INTEGER NOT NULL DEFAULT 0,
    rate_count INTEGER, rate_period REAL, PRIMARY KEY(board, grp));
CREATE TABLE IF NOT EXISTS jb_grant(board INTEGER NOT NULL, grp TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS jb_grant_at ON jb_grant(board, grp, at);
CREATE TABLE IF NOT EXISTS jb_pause(board INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY(board, name));
CREATE INDEX IF NOT EXISTS jb_job_grp ON jb_job(board, grp, state, seq) WHERE grp IS NOT NULL;
"""
"""The flow-control tables (schema version 2; a version 1 file gains them, and the columns
``jb_job.grp``, ``jb_board.flow`` and ``jb_board.paused``, when a board of this version opens it)."""

UPGRADE_1_TO_2 = ("ALTER TABLE jb_job ADD COLUMN grp TEXT",
                  "ALTER TABLE jb_board ADD COLUMN flow INTEGER NOT NULL DEFAULT 0",
                  "ALTER TABLE jb_board ADD COLUMN paused INTEGER NOT NULL DEFAULT 0")


def clock() -> float:
    """The rate's clock: ``CLOCK_MONOTONIC``, shared by the processes of the host, unmoved by NTP steps."""
    return time.monotonic()


@dataclass(frozen=True, slots=True)
class Stored:
    """The limits and pauses of a board, read at ``jb_board.flow`` = ``version``."""

    version: int
    board_paused: bool
    names: frozenset[str]
    limits: tuple[LimitSpec, ...]


def gate(conn: sqlite3.Connection, scope: Scope) -> Gate | None:
    """The board's gate now, or ``None`` when it has no limit nor pause (one ``SELECT`` then); sets
    ``scope.gated``. The limits and pauses are read again only when ``jb_board.flow`` changed."""
    row = conn.execute("SELECT flow, paused FROM jb_board WHERE id=?", (scope.board,)).fetchone()
    version = int(row[0]) if row is not None else 0
    scope.gated = version > 0
    if version <= 0:
        return None
    stored = scope.stored
    if not isinstance(stored, Stored) or stored.version != version:
        names = frozenset(name for (name,) in conn.execute("SELECT name FROM jb_pause WHERE board=?", (scope.board,)))
        stored = scope.stored = Stored(version, bool(row[1]), names, tuple(_limits(conn, scope).values()))
    found = Gate(stored.board_paused, stored.names, now=clock())
    if not found.board_paused:
        for limit in stored.limits:
            found._look(conn, scope, limit)
    return found


def changed(conn: sqlite3.Connection, scope: Scope, fx: Effects) -> None:
    """(The last step of a write that changed a limit or a pause.) Recount the board's limits and pauses;
    every waiting session of the board is popped and rung (what it waits for may be free now)."""
    conn.execute("UPDATE jb_board SET flow=(abs(flow) + 1) * (CASE WHEN (SELECT count(*) FROM jb_limit WHERE board=?1)"
                 " + (SELECT count(*) FROM jb_pause WHERE board=?1) + paused > 0 THEN 1 ELSE -1 END) WHERE id=?1",
                 (scope.board,))
    fx.wake += [(session, address) for session, address in conn.execute(
        "UPDATE jb_session SET waiting=NULL WHERE board=? AND waiting IS NOT NULL RETURNING id, addr", (scope.board,))]


# -- what is stored ------------------------------------------------------------

def set_limit(conn: sqlite3.Connection, scope: Scope, limit: LimitSpec, fx: Effects) -> None:
    """Store ``limit``, replacing its group's. The group's recent grants are kept whatever the rate was (a
    rate cleared and set again, or changed, still sees them: no window holds more than its count), as
    on memory:// and zookeeper://; the last two windows' at most are kept (:meth:`Gate.granted` prunes)."""
    rate = limit.rate
    conn.execute("INSERT OR REPLACE INTO jb_limit(board, grp, concurrency, sequence, rate_count, rate_period)"
                 " VALUES (?,?,?,?,?,?)", (scope.board, limit.group, limit.concurrency, int(limit.sequence),
                                           None if rate is None else rate.count, None if rate is None else rate.period))
    changed(conn, scope, fx)


def clear_limit(conn: sqlite3.Connection, scope: Scope, group: str, fx: Effects) -> bool:
    found = conn.execute("DELETE FROM jb_limit WHERE board=? AND grp=?", (scope.board, group)).rowcount > 0
    changed(conn, scope, fx)
    return found


def pause(conn: sqlite3.Connection, scope: Scope, name: str | None, paused: bool, fx: Effects) -> None:
    """Pause (or resume, ``paused=False``) ``name``, or the board when ``name`` is ``None``."""
    if name is None:
        conn.execute("UPDATE jb_board SET paused=? WHERE id=?", (int(paused), scope.board))
    elif paused:
        conn.execute("INSERT OR IGNORE INTO jb_pause(board, name) VALUES (?,?)", (scope.board, name))
    else:
        conn.execute("DELETE FROM jb_pause WHERE board=? AND name=?", (scope.board, name))
    changed(conn, scope, fx)


def paused(conn: sqlite3.Connection, scope: Scope) -> Paused:
    board = conn.execute("SELECT paused FROM jb_board WHERE id=?", (scope.board,)).fetchone()
    names = frozenset(row[0] for row in conn.execute("SELECT name FROM jb_pause WHERE board=?", (scope.board,)))
    return Paused(bool(board and board[0]), names)


def limits(conn: sqlite3.Connection, scope: Scope) -> list[GroupLimit]:
    """Every limit by group, with the group's claimed jobs and its unclaimed ones (ready, held back or delayed;
    not those waiting for dependencies, as on every backend)."""
    listed = []
    for limit in _limits(conn, scope).values():
        running, waiting = conn.execute(
            "SELECT count(*) FILTER (WHERE state=1), count(*) FILTER (WHERE state=0) FROM jb_job"
            " WHERE board=? AND grp=?", (scope.board, limit.group)).fetchone()
        listed.append(GroupLimit.of(limit, int(running), int(waiting)))
    return listed


def _limits(conn: sqlite3.Connection, scope: Scope) -> dict[str, LimitSpec]:
    rows = conn.execute("SELECT grp, concurrency, sequence, rate_count, rate_period FROM jb_limit WHERE board=?"
                        " ORDER BY grp", (scope.board,))
    return {grp: LimitSpec(grp, concurrency, bool(sequence), None if count is None else Rate(int(count), float(period)))
            for grp, concurrency, sequence, count, period in rows}


# -- the check, in the claim's transaction ---------------------------------------

@dataclass(slots=True)
class Gate:
    """What holds jobs back now (read in the claim's transaction): the pauses, the groups held and why,
    the one job a sequence group may run, the rated groups."""

    board_paused: bool = False
    names: frozenset[str] = frozenset()
    held: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    """Group -> (why, seconds until its next rate permit)."""
    heads: dict[str, int] = field(default_factory=dict)
    """A sequence group not held -> the sequence of the one job it may run."""
    rates: dict[str, Rate] = field(default_factory=dict)
    prune: set[str] = field(default_factory=set)
    """Rated groups whose stale grants :meth:`granted` deletes (see :meth:`_rate_due`)."""
    now: float = 0.0

    def _look(self, conn: sqlite3.Connection, scope: Scope, limit: LimitSpec) -> None:
        group = limit.group
        if limit.rate is not None:
            self.rates[group] = limit.rate
        if limit.concurrency is not None:
            (running,) = conn.execute("SELECT count(*) FROM jb_job WHERE board=? AND grp=? AND state=1",
                                      (scope.board, group)).fetchone()
            if running >= limit.concurrency:
                self.held[group] = ("concurrency", None)
                return
        if limit.sequence:
            firsts = conn.execute(  # each a seek in jb_job_grp: the group's first job in each live state
                "SELECT (SELECT min(seq) FROM jb_job WHERE board=?1 AND grp=?2 AND state=0),"
                " (SELECT min(seq) FROM jb_job WHERE board=?1 AND grp=?2 AND state=1),"
                " (SELECT min(seq) FROM jb_job WHERE board=?1 AND grp=?2 AND state=2)", (scope.board, group)).fetchone()
            live = [seq for seq in firsts if seq is not None]
            if live and (firsts[1] is not None or min(live) != firsts[0]):  # one running, or the head not ready
                self.held[group] = ("sequence", None)
                return
            if live:
                self.heads[group] = int(firsts[0])
        if limit.rate is not None:
            due = self._rate_due(conn, scope, group, limit.rate)
            if due is not None:
                self.held[group] = ("rate", due)

    def _rate_due(self, conn: sqlite3.Connection, scope: Scope, group: str, rate: Rate) -> float | None:
        """Seconds until the group's next permit, or ``None`` when one is free now.

        Seeks first, one statement: the rowids of the window's oldest and newest grants of the group bound
        how many it holds (a new row's rowid is above every row's in the table, so a group's grants are in
        rowid order; other groups' grants between them only widen the bound). Only a bound of ``count`` or
        more counts them, one by one (a count reads every grant in the window: at 4 000 grants, 0.44x the
        cycles of no limit in ``benchmarks/flow.py``, 0.80x with the bound). The group's grants are pruned
        (:meth:`granted`) once its oldest is two periods old, those later than now too (left by a boot
        before: the host's monotonic clock restarted): two deletes a period, not two statements a grant."""
        window = (scope.board, group, self.now - rate.period, self.now)
        first, last, oldest = conn.execute(
            "SELECT (SELECT rowid FROM jb_grant WHERE board=?1 AND grp=?2 AND at>?3 AND at<=?4 ORDER BY at LIMIT 1),"
            " (SELECT rowid FROM jb_grant WHERE board=?1 AND grp=?2 AND at>?3 AND at<=?4 ORDER BY at DESC LIMIT 1),"
            " (SELECT min(at) FROM jb_grant WHERE board=?1 AND grp=?2)", window).fetchone()
        if oldest is not None and oldest <= self.now - 2 * rate.period:
            self.prune.add(group)
        if first is None or 0 <= last - first < rate.count - 1:
            return None
        (granted,) = conn.execute("SELECT count(*) FROM jb_grant WHERE board=? AND grp=? AND at>? AND at<=?",
                                  window).fetchone()
        if granted < rate.count:
            return None
        (oldest,) = conn.execute("SELECT at FROM jb_grant WHERE board=? AND grp=? AND at>? AND at<=? ORDER BY at DESC"
                                 " LIMIT 1 OFFSET ?", (*window, rate.count - 1)).fetchone()
        return max(1e-3, float(oldest) + rate.period - self.now)

    def condition(self) -> tuple[str, list[Any]]:
        """The SQL condition (and its parameters) of a ``jb_job`` row not held back."""
        if self.board_paused:
            return "0", []
        parts: list[str] = []
        params: list[Any] = []
        if self.names:
            parts.append(f"name NOT IN ({','.join('?' * len(self.names))})")
            params += sorted(self.names)
        if self.held:
            parts.append(f"(grp IS NULL OR grp NOT IN ({','.join('?' * len(self.held))}))")
            params += sorted(self.held)
        if self.heads:
            parts.append(f"(grp IS NULL OR grp NOT IN ({','.join('?' * len(self.heads))})"
                         f" OR seq IN ({','.join('?' * len(self.heads))}))")
            params += [*self.heads, *self.heads.values()]
        return " AND ".join(parts) or "1", params

    def refusal(self, seq: int, name: str, group: str | None) -> HeldBack | None:
        """Why the job ``seq`` is held back, or ``None`` (``claim(job)``'s check)."""
        if self.board_paused or name in self.names:
            what = "the board is paused" if self.board_paused else f"its name {name!r} is paused"
            return HeldBack(f"job {job_id(seq)} is held back: {what}", why="paused")
        if group is None:
            return None
        why, due = self.held.get(group, ("", None))
        if not why and group in self.heads and self.heads[group] != seq:
            why = "sequence"
        if not why:
            return None
        text = {"concurrency": "its group {!r} is at its concurrency limit",
                "sequence": "an earlier job of its group {!r} is still on the board",
                "rate": "its group {!r} used its rate"}[why].format(group)
        return HeldBack(f"job {job_id(seq)} is held back: {text}", why=why, retry_after=due)

    def granted(self, conn: sqlite3.Connection, scope: Scope, group: str | None) -> None:
        """A claim of a job of ``group`` was taken: counted in the group's rate window."""
        rate = None if group is None else self.rates.get(group)
        if rate is None:
            return
        if group in self.prune:  # two range deletes, each a seek in jb_grant_at (an ``OR`` read every grant)
            self.prune.discard(group)
            conn.execute("DELETE FROM jb_grant WHERE board=? AND grp=? AND at<=?",
                         (scope.board, group, self.now - rate.period))
            conn.execute("DELETE FROM jb_grant WHERE board=? AND grp=? AND at>?", (scope.board, group, self.now))
        conn.execute("INSERT INTO jb_grant(board, grp, at) VALUES (?,?,?)", (scope.board, group, self.now))

    def next_permit(self) -> float | None:
        """Seconds until the first rate-held group's next permit (``wait`` sleeps until then)."""
        dues = [due for why, due in self.held.values() if why == "rate" and due is not None]
        return min(dues) if dues else None
