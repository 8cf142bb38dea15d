"""A rated group's ring of grants on a ``sqlite://`` board (issue 27; read and written by :mod:`jobboard_sqlite.flow`'s gate).

``jb_grant`` holds a rated group's last ``ring >= count`` grant times on the host's ``CLOCK_MONOTONIC`` (shared by
every process of the host): slot ``n mod ring`` holds the time of the group's grant number ``n``, and ``n``. Every
function here runs in the caller's write transaction (a claim's, or a limit's change): the ring is changed only
with it, so the file's write lock makes a grant and the check before it one atomic step.
"""

from __future__ import annotations

import sqlite3
import time

from jobboard.board.limits import Rate

SLOT_N = "(SELECT n FROM jb_grant WHERE board=? AND grp=? AND slot=?)"
SLOT_AT = "(SELECT at FROM jb_grant WHERE board=? AND grp=? AND slot=?)"
SLOT_PROBE = "(SELECT CASE n WHEN ? THEN at ELSE -1.0 - n END FROM jb_grant WHERE board=? AND grp=? AND slot=?)"
"""Slot ``n mod ring`` of a ring of ``count`` slots, in one seek: the time of grant ``n - count`` if it holds that
grant (a time is never negative), ``-1 - m`` if it holds another grant ``m``, NULL if it is empty."""
GRANT_OVER = "UPDATE jb_grant SET at=?, n=? WHERE board=? AND grp=? AND slot=?"
GRANT_NEW = "INSERT OR REPLACE INTO jb_grant(at, n, board, grp, slot) VALUES (?,?,?,?,?)"


def grant(conn: sqlite3.Connection, board: int, group: str, ring: int, number: int, at: float) -> None:
    """Write ``group``'s grant ``number`` (at ``at``) in slot ``number mod ring``: in place of grant ``number - ring``
    once the ring is full (every slot is written from then on), else a new row."""
    values = (at, number, board, group, number % ring)
    if number < ring or conn.execute(GRANT_OVER, values).rowcount == 0:
        conn.execute(GRANT_NEW, values)


def upgrade_grants(conn: sqlite3.Connection) -> None:
    """(Version 2 to 3, in the opening's write transaction, after :data:`jobboard_sqlite.flow.UPGRADE_2_TO_3` and
    :data:`jobboard_sqlite.flow.DDL`.) Each
    group's logged grants (none later than now) become its ring; a rated group's is then rebuilt (:func:`rebuild`)."""
    now = clock()
    logged: dict[tuple[int, str], list[float]] = {}
    for board, grp, at in conn.execute("SELECT board, grp, at FROM jb_grant_log WHERE at<=? ORDER BY board, grp, at DESC",
                                       (now,)):
        logged.setdefault((board, grp), []).append(float(at))
    for (board, grp), times in logged.items():
        write_ring(conn, board, grp, times)
    rates = list(conn.execute("SELECT board, grp, rate_count, rate_period FROM jb_limit WHERE rate_count IS NOT NULL"))
    for board, grp, count, period in rates:
        rebuild(conn, board, grp, Rate(int(count), float(period)), now)
    conn.execute("DROP TABLE jb_grant_log")


def retire(conn: sqlite3.Connection, board: int, group: str, period: float) -> None:
    """(A rate cleared, or its limit set again without one.) The group's grants stay (a rate set again sees them)
    until :func:`sweep` finds none in the last ``period``: slot -1 holds that period until then (``at``; a rate
    set again rewrites the ring, and drops it)."""
    conn.execute("INSERT OR REPLACE INTO jb_grant(board, grp, slot, at, n) VALUES (?,?,-1,?,-1)", (board, group, period))


def sweep(conn: sqlite3.Connection, board: int, now: float) -> int:
    """(In a write transaction.) Delete the grants of the groups whose rate was cleared (:func:`retire`), not set
    again, and none of whose grants falls in the cleared rate's last period (a grant later than now is a boot
    before's: the monotonic clock restarted). Returns the rows deleted."""
    return conn.execute(
        "DELETE FROM jb_grant WHERE board=?1 AND grp IN (SELECT m.grp FROM jb_grant m WHERE m.board=?1 AND m.slot=-1"
        " AND NOT EXISTS (SELECT 1 FROM jb_limit l WHERE l.board=?1 AND l.grp=m.grp AND l.rate_count IS NOT NULL)"
        " AND NOT EXISTS (SELECT 1 FROM jb_grant g WHERE g.board=?1 AND g.grp=m.grp AND g.slot>=0"
        " AND g.at>?2-m.at AND g.at<=?2))", (board, now)).rowcount


def rebuild(conn: sqlite3.Connection, board: int, group: str, rate: Rate, now: float) -> None:
    """Write ``group``'s ring anew for ``rate`` (in a write transaction): its latest ``count`` grants and every
    later one of the last ``period`` (a count made smaller still sees the window's grants), in ``ring =
    max(count, kept)`` slots; grants later than now (a boot before's: the monotonic clock restarted) dropped."""
    times = [float(at) for (at,) in conn.execute(
        "SELECT at FROM jb_grant WHERE board=? AND grp=? AND slot>=0 AND at<=? ORDER BY at DESC", (board, group, now))]
    kept = [at for index, at in enumerate(times) if index < rate.count or at > now - rate.period]
    write_ring(conn, board, group, kept)
    conn.execute("UPDATE jb_limit SET ring=? WHERE board=? AND grp=?", (max(rate.count, len(kept)), board, group))


def write_ring(conn: sqlite3.Connection, board: int, group: str, newest_first: list[float]) -> None:
    """Write ``group``'s ring anew: its grants ``newest_first`` in slots 0.., oldest first, numbered as their slots."""
    conn.execute("DELETE FROM jb_grant WHERE board=? AND grp=?", (board, group))
    conn.executemany("INSERT INTO jb_grant(board, grp, slot, at, n) VALUES (?,?,?,?,?)",
                     [(board, group, slot, at, slot) for slot, at in enumerate(reversed(newest_first))])


def clock() -> float:
    """The rate's clock: ``CLOCK_MONOTONIC``, shared by the processes of the host, unmoved by NTP steps."""
    return time.monotonic()


def probed(probe: float | None, number: int, count: int) -> tuple[int | None, int | None, float | None]:
    """:data:`SLOT_PROBE`'s read of slot ``number`` (a ring of ``count`` slots) as :meth:`Gate._rate_due`'s figures.
    The slot holding grant ``number - count`` (empty while ``number < count``) proves ``number`` right: this board saw
    grant ``number - 1``, and within a version of the limits a slot's number only grows (:func:`rebuild` bumps it)."""
    if probe is not None and probe >= 0:
        return (number - 1 if number else None), number - count, probe
    if probe is None and number < count:
        return (number - 1 if number else None), None, None
    return None, (None if probe is None else int(-1 - probe)), None  # judged again by a search of the ring


def next_number(conn: sqlite3.Connection, board: int, group: str, ring: int) -> int:
    """The group's next grant number, by a binary search of its ring (at most ``log2(ring) + 2`` seeks): the
    slots from 0 hold numbers not below slot 0's up to the latest, then smaller ones or none."""
    def number(slot: int) -> int:
        row = conn.execute("SELECT n FROM jb_grant WHERE board=? AND grp=? AND slot=?", (board, group, slot)).fetchone()
        return -1 if row is None else int(row[0])
    first = number(0)
    if first < 0:
        return 0
    low, high = 1, ring
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if number(middle) < first else (middle + 1, high)
    return number(low - 1) + 1
