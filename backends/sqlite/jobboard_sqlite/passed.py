"""What a gated claim on a ``sqlite://`` board passed over (issue 27: ``JobBoard.held_back``).

A gated ``claim_next`` takes the best job its :class:`~jobboard_sqlite.flow.Gate` does not hold back; the
ready jobs better in the claim order (``rank, seq``) that it passed over are all held back. Which ``why``
each was held back for is asked by one ``EXISTS`` per kind of hold the gate has (paused names, the groups held
for each why, the sequences' later jobs), as extra ``RETURNING`` columns of the claim's own ``UPDATE`` (no
statement more), or, when nothing was taken, by one ``SELECT`` of them all. Read in the claim's transaction;
nothing written. A board with nothing held back (no pause, no group at its limit) asks nothing.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from jobboard_sqlite.flow import Gate

Check = tuple[str, str, list[Any]]
"""A why, and the SQL condition (with its parameters) of a ``jb_job`` row held back for it."""

READY = ("SELECT 1 FROM jb_job x WHERE x.board=? AND x.state=0 AND (x.not_before IS NULL OR x.not_before<=?)"
         " AND {names} AND {held}")
BEFORE = (" AND x.rank<jb_job.rank", " AND x.rank=jb_job.rank AND x.seq<jb_job.seq")
"""Better than the claimed row: two ``EXISTS``, each a bounded range of the ready index (an ``OR`` or a row value
bounds ``rank`` only, and a claim then read every ready job of its rank)."""


def _marks(values: list[Any]) -> str:
    return ",".join("?" * len(values))


def checks(gate: Gate) -> list[Check]:
    """One check per kind of hold ``gate`` has (none: nothing is held back now)."""
    if gate.board_paused:
        return [("paused", "1", [])]
    found: list[Check] = []
    if gate.names:
        names = sorted(gate.names)
        found.append(("paused", f"x.name IN ({_marks(names)})", names))
    for why in ("concurrency", "sequence", "rate"):
        groups = sorted(group for group, (held, _) in gate.held.items() if held == why)
        if groups:
            found.append((why, f"x.grp IN ({_marks(groups)})", groups))
    if gate.heads:
        groups, heads = list(gate.heads), list(gate.heads.values())
        found.append(("sequence", f"x.grp IN ({_marks(groups)}) AND x.seq NOT IN ({_marks(heads)})", groups + heads))
    return found


_BUILT: dict[tuple[Any, ...], tuple[list[Check], str]] = {}
"""The checks and ``RETURNING`` columns of a gate's holds and a name filter, built once (a few us each)."""


def returning(gate: Gate, board: int, now: float, names: str, params: list[Any]) -> tuple[list[Check], str, list[Any]]:
    """``gate``'s checks, and ``", (EXISTS (...) OR EXISTS (...)), ..."``: a column per check for the ``RETURNING``
    of the claim's ``UPDATE jb_job`` (``names``, ``params``: the claim's name filter), true where a job better
    than the one taken is held back for it; with its parameters."""
    key = (gate.board_paused, gate.names, tuple((group, held[0]) for group, held in gate.held.items()),
           tuple(gate.heads.items()), names)
    built = _BUILT.get(key)
    if built is None:
        found = checks(gate)
        columns = "".join(f", (EXISTS ({ready}{BEFORE[0]}) OR EXISTS ({ready}{BEFORE[1]}))"
                          for ready in (READY.format(names=names, held=held) for _, held, _ in found))
        if len(_BUILT) > 256:
            _BUILT.clear()
        built = _BUILT[key] = (found, columns)
    found, columns = built
    return found, columns, [value for _, _, held_params in found for value in [board, now, *params, *held_params] * 2]


def whys(found: list[Check], flags: Any) -> set[str]:
    """The whys of the checks whose flag (a ``RETURNING`` column, in order) is true."""
    return {why for (why, _, _), flag in zip(found, flags, strict=True) if flag}


def without_claim(conn: sqlite3.Connection, found: list[Check], board: int, now: float, names: str,
                  params: list[Any]) -> set[str]:
    """Nothing taken: why the claimable jobs are held back (one ``SELECT``)."""
    if not found:
        return set()
    columns = ", ".join(f"EXISTS ({READY.format(names=names, held=held)})" for _, held, _ in found)
    values = [value for _, _, held_params in found for value in (board, now, *params, *held_params)]
    return whys(found, conn.execute(f"SELECT {columns}", values).fetchone())
