"""Flow control on a ``sqlite://`` board (issue 27; the rules: :mod:`jobboard.board.limits`).

Stored in the file, so every board of every process reads the same: ``jb_limit`` (a group's limit),
``jb_pause`` (paused names), ``jb_board.paused`` (the whole board) and ``jb_grant`` (a rated group's
last grants: :mod:`jobboard_sqlite.grants`). ``jb_board.flow`` is positive while the board has a limit or a pause, and takes a new
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
from dataclasses import dataclass, field
from typing import Any

from jobboard.board.limits import GroupLimit, LimitSpec, Paused, Rate
from jobboard.errors import HeldBack
from jobboard_sqlite import grants
from jobboard_sqlite.rows import Effects, Scope, job_id

DDL = """
CREATE TABLE IF NOT EXISTS jb_limit(
    board INTEGER NOT NULL, grp TEXT NOT NULL, concurrency INTEGER, sequence INTEGER NOT NULL DEFAULT 0,
    rate_count INTEGER, rate_period REAL, ring INTEGER, PRIMARY KEY(board, grp));
CREATE TABLE IF NOT EXISTS jb_grant(
    board INTEGER NOT NULL, grp TEXT NOT NULL, slot INTEGER NOT NULL, at REAL NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY(board, grp, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jb_pause(board INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY(board, name));
CREATE INDEX IF NOT EXISTS jb_job_grp ON jb_job(board, grp, state, seq) WHERE grp IS NOT NULL;
"""
"""The flow-control tables (schema version 3; a version 1 file gains them, and the columns
``jb_job.grp``, ``jb_board.flow`` and ``jb_board.paused``, when a board of this version opens it)."""

UPGRADE_1_TO_2 = ("ALTER TABLE jb_job ADD COLUMN grp TEXT",
                  "ALTER TABLE jb_board ADD COLUMN flow INTEGER NOT NULL DEFAULT 0",
                  "ALTER TABLE jb_board ADD COLUMN paused INTEGER NOT NULL DEFAULT 0")
UPGRADE_2_TO_3 = ("ALTER TABLE jb_grant RENAME TO jb_grant_log", "DROP INDEX jb_grant_at",
                  "ALTER TABLE jb_limit ADD COLUMN ring INTEGER")




@dataclass(slots=True)
class Stored:
    """The limits and pauses of a board, read at ``jb_board.flow`` = ``version``."""

    version: int
    board_paused: bool
    names: frozenset[str]
    limits: tuple[LimitSpec, ...]
    rings: dict[str, int]
    """A rated group -> its ring's slots (``jb_limit.ring``: at least the rate's count)."""
    known: dict[str, int] = field(default_factory=dict)
    """A rated group -> its next grant number as this board last knew it (checked by every gate: :meth:`Gate._rate_due`)."""
    sql: str | None = None
    """The gate's ``SELECT`` of the version and the figures of the first limits (:func:`gate`), once built."""


LIMITS_A_STATEMENT = 64
"""Limits whose figures one ``SELECT`` reads (at most 7 columns each: SQLite's default cap is 2 000)."""


def gate(conn: sqlite3.Connection, scope: Scope) -> Gate | None:
    """The board's gate now, or ``None`` when it has no limit nor pause (one ``SELECT`` then); sets
    ``scope.gated``. The limits and pauses are read again only when ``jb_board.flow`` changed; the figures
    of the cached limits (running jobs, a sequence's heads, a rated group's oldest permit) are read by the same
    ``SELECT`` as the version (its text kept with them), and are used only if the version is the cached one."""
    now = grants.clock()
    cached = scope.stored if isinstance(scope.stored, Stored) else None
    first = cached.limits[:LIMITS_A_STATEMENT] if cached is not None and not cached.board_paused else ()
    sql = None if cached is None else cached.sql
    if sql is None:
        sql = f"SELECT flow, paused{_columns(first, cached)} FROM jb_board WHERE id=?"
        if cached is not None:
            cached.sql = sql
    row = conn.execute(sql, (*_params(first, scope.board, cached), scope.board)).fetchone()
    version = int(row[0]) if row is not None else 0
    scope.gated = version > 0
    if version <= 0:
        return None
    stored, values = cached, list(row[2:])
    if stored is None or stored.version != version:
        names = frozenset(name for (name,) in conn.execute("SELECT name FROM jb_pause WHERE board=?", (scope.board,)))
        rings = dict(conn.execute("SELECT grp, ring FROM jb_limit WHERE board=? AND ring IS NOT NULL", (scope.board,)))
        stored = scope.stored = Stored(version, bool(row[1]), names, tuple(_limits(conn, scope).values()), rings)
        first, values = (), []
    found = Gate(stored.board_paused, stored.names, now=now, rings=stored.rings, known=stored.known)
    if not found.board_paused:
        rest = stored.limits[len(first):]
        for start in range(0, len(rest), LIMITS_A_STATEMENT):
            chunk = rest[start:start + LIMITS_A_STATEMENT]
            values += conn.execute(f"SELECT {_columns(chunk, stored)[2:]}", _params(chunk, scope.board, stored)).fetchone()
        at = 0
        for limit in stored.limits:
            at = found._look(conn, scope, limit, values, at)
    return found


def _columns(limits: tuple[LimitSpec, ...], stored: Stored | None) -> str:
    """``", (subquery), ..."``: what :meth:`Gate._look` reads of each of ``limits``, in order (each a seek in
    jb_job_grp or jb_grant's key): the running jobs; a sequence's first job in each live state; a rated group's
    slot of grant ``n`` (:data:`~jobboard_sqlite.grants.SLOT_PROBE`; ``n``: its next grant number as ``stored`` knows it), or with a ring
    bigger than its count the numbers in the slots of grants ``n - 1`` and ``n`` and the time of grant ``n - count``."""
    columns: list[str] = []
    for limit in limits:
        if limit.concurrency is not None:
            columns.append("(SELECT count(*) FROM jb_job WHERE board=? AND grp=? AND state=1)")
        if limit.sequence:
            columns += [f"(SELECT min(seq) FROM jb_job WHERE board=? AND grp=? AND state={state})" for state in (0, 1, 2)]
        if limit.rate is not None:
            probe = stored is None or stored.rings.get(limit.group, limit.rate.count) == limit.rate.count
            columns += [grants.SLOT_PROBE] if probe else [grants.SLOT_N, grants.SLOT_N, grants.SLOT_AT]
    return "".join(f", {column}" for column in columns)


def _params(limits: tuple[LimitSpec, ...], board: int, stored: Stored | None) -> list[Any]:
    """The parameters of :func:`_columns`."""
    params: list[Any] = []
    for limit in limits:
        group = limit.group
        if limit.concurrency is not None:
            params += [board, group]
        if limit.sequence:
            params += [board, group] * 3
        if limit.rate is not None:
            count = limit.rate.count
            ring = stored.rings.get(group, count) if stored is not None else count
            number = stored.known.get(group, 0) if stored is not None else 0
            if ring == count:
                params += [number - count, board, group, number % ring]
            else:
                params += [board, group, (number - 1) % ring, board, group, number % ring,
                           board, group, (number - count) % ring if number >= count else -1]
    return params


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
    on memory:// and zookeeper://: a rate's ring is written anew (:func:`~jobboard_sqlite.grants.rebuild`, a read of its rows)."""
    rate = limit.rate
    if rate is None:
        _retire(conn, scope, limit.group)
    conn.execute("INSERT OR REPLACE INTO jb_limit(board, grp, concurrency, sequence, rate_count, rate_period)"
                 " VALUES (?,?,?,?,?,?)", (scope.board, limit.group, limit.concurrency, int(limit.sequence),
                                           None if rate is None else rate.count, None if rate is None else rate.period))
    if rate is not None:
        grants.rebuild(conn, scope.board, limit.group, rate, grants.clock())
    changed(conn, scope, fx)


def clear_limit(conn: sqlite3.Connection, scope: Scope, group: str, fx: Effects) -> bool:
    """Delete ``group``'s limit; its rate's grants are swept once that rate's period is over (see
    :func:`~jobboard_sqlite.grants.retire`)."""
    _retire(conn, scope, group)
    found = conn.execute("DELETE FROM jb_limit WHERE board=? AND grp=?", (scope.board, group)).rowcount > 0
    changed(conn, scope, fx)
    return found


def _retire(conn: sqlite3.Connection, scope: Scope, group: str) -> None:
    """The group's rate (if it has one) goes: its grants are swept once its period is over."""
    row = conn.execute("SELECT rate_period FROM jb_limit WHERE board=? AND grp=? AND rate_count IS NOT NULL",
                       (scope.board, group)).fetchone()
    if row is not None:
        grants.retire(conn, scope.board, group, float(row[0]))


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

def _width(limit: LimitSpec, rings: dict[str, int]) -> int:
    """How many figures :func:`_columns` reads of ``limit`` (a rate: 1 with a ring of ``count`` slots, else 3)."""
    rate = 0 if limit.rate is None else 1 if rings.get(limit.group, limit.rate.count) == limit.rate.count else 3
    return (limit.concurrency is not None) + 3 * limit.sequence + rate


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
    numbers: dict[str, int] = field(default_factory=dict)
    """A rated group with a permit free -> its grant number (the next grant's, see :meth:`granted`)."""
    rings: dict[str, int] = field(default_factory=dict)
    """A rated group -> its ring's slots (:class:`Stored`)."""
    known: dict[str, int] = field(default_factory=dict)
    """:attr:`Stored.known` (updated by this gate)."""
    now: float = 0.0

    def _look(self, conn: sqlite3.Connection, scope: Scope, limit: LimitSpec, values: list[Any], at: int) -> int:
        """Judge ``limit``'s group from its figures (``values[at:]``, as :func:`_columns` lists them); return
        where the next limit's figures begin."""
        group, rate, width = limit.group, limit.rate, _width(limit, self.rings)
        mine = values[at:at + width]
        if rate is not None:
            self.rates[group] = rate
        if limit.concurrency is not None:
            running, mine = mine[0], mine[1:]
            if running >= limit.concurrency:
                self.held[group] = ("concurrency", None)
                return at + width
        if limit.sequence:
            firsts, mine = mine[:3], mine[3:]
            live = [seq for seq in firsts if seq is not None]
            if live and (firsts[1] is not None or min(live) != firsts[0]):  # one running, or the head not ready
                self.held[group] = ("sequence", None)
                return at + width
            if live:
                self.heads[group] = int(firsts[0])
        if rate is not None:
            due = self._rate_due(conn, scope, group, rate, mine)
            if due is not None:
                self.held[group] = ("rate", due)
        return at + width

    def _rate_due(self, conn: sqlite3.Connection, scope: Scope, group: str, rate: Rate,
                  figures: list[Any]) -> float | None:
        """Seconds until the group's next permit, or ``None`` when one is free now.

        The ring holds the group's last ``ring >= count`` grants, numbered 0, 1, ...: slot ``i`` the latest
        number ``= i mod ring``. ``figures`` (read with the gate's version, for ``n`` = the next number as
        this board knew it): the numbers in slots ``n - 1`` and ``n`` and the time of grant ``n - count`` (with a
        ring of ``count`` slots, one probe of slot ``n`` stands for the three: :func:`grants.probed`). They
        prove ``n`` right iff slot ``n - 1`` holds ``n - 1`` (empty for 0) and slot ``n`` holds less or nothing; else ``n`` is found by a binary search of the slots (another board granted since).
        A permit is free iff grant ``n - count`` is none, ``period`` old, or later than now (a boot
        before's: the host's monotonic clock restarted); else it is due when that grant is ``period`` old
        (exact: the window holds ``count``; within a boot, numbers are in time order)."""
        ring, number = self.rings.get(group, rate.count), self.known.get(group, 0)
        before, after, oldest = grants.probed(figures[0], number, rate.count) if len(figures) == 1 else figures
        if before != (number - 1 if number else None) or (after is not None and after >= number):
            number = grants.next_number(conn, scope.board, group, ring)
            oldest = None if number < rate.count else conn.execute(
                "SELECT at FROM jb_grant WHERE board=? AND grp=? AND slot=?",
                (scope.board, group, (number - rate.count) % ring)).fetchone()[0]
        self.known[group] = number
        if oldest is not None and self.now - rate.period < oldest <= self.now:
            return max(1e-3, float(oldest) + rate.period - self.now)
        self.numbers[group] = number
        return None

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
        """A claim of a job of ``group`` was taken (at most one a gate): counted in the group's rate, one
        row written (grant ``n`` in slot ``n mod ring``, over grant ``n - ring``)."""
        rate = None if group is None else self.rates.get(group)
        if group is None or rate is None:
            return
        ring = self.rings.get(group, rate.count)
        number = self.numbers.pop(group, None)
        if number is None:  # not judged free by this gate (a caller's mistake): find the number, grant anyway
            number = grants.next_number(conn, scope.board, group, ring)
        grants.grant(conn, scope.board, group, ring, number, self.now)
        self.known[group] = number + 1

    def next_permit(self) -> float | None:
        """Seconds until the first rate-held group's next permit (``wait`` sleeps until then)."""
        dues = [due for why, due in self.held.values() if why == "rate" and due is not None]
        return min(dues) if dues else None


