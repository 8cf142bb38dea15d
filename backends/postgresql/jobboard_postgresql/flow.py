"""Flow control on a ``postgresql://`` board: limits per group and pauses, stored where every board reads them.

Each operation is one function call (one transaction; the SQL and the design are in
:mod:`jobboard_postgresql.flow_sql`); a write that changes a limit or a pause wakes every idle session of
the board. The claims honour them in their own transaction (``jb.claim_next``, ``jb.cycle``, ``jb.claim``);
``wait()`` reads the same gate (:data:`GATED_CLAIMABLE`). Errors: ``BackendUnavailable`` /
``BoardConflict`` from :class:`~jobboard_postgresql.database.Database`.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from jobboard.board.limits import GroupLimit, LimitSpec, Paused, Rate
from jobboard.errors import HeldBack
from jobboard_postgresql.database import Database

GATE = ("NOT g.o_off AND j.name <> ALL(g.o_names) AND (j.grp IS NULL OR (j.grp <> ALL(g.o_held) AND "
        "(j.grp <> ALL(g.o_seqs) OR j.id = ANY(g.o_heads))))")
"""The condition of a ``job j`` row that the gate ``g`` (``jb.gate``) does not hold back."""

WHY = {"paused": "its name or the board is paused", "concurrency": "its group is at its concurrency limit",
       "sequence": "an earlier job of its group is still on the board", "rate": "its group used its rate"}


def held_back(job_id: str, detail: str) -> HeldBack:
    """``jb.claim``'s refusal (status 6, ``detail`` = ``why [seconds until the next rate permit]``)."""
    why, _, due = detail.partition(" ")
    return HeldBack(f"job {job_id} is held back: {WHY.get(why, why)}", why=why,
                    retry_after=float(due) if due.strip() else None)


class Flow:
    """The limits and pauses of one board (its name and schema)."""

    def __init__(self, db: Database, board: str, schema: str) -> None:
        self.db, self.board, self.s = db, board, f'"{schema}"'

    async def _call(self, what: str, query: str, *args: Any) -> Any:
        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetch(query, *args)

        return await self.db.run(what, call)

    async def set_limit(self, limit: LimitSpec) -> None:
        """Store ``limit``, replacing its group's (the group's recent grant times are kept)."""
        rate = limit.rate
        await self._call("set_limit", f"SELECT {self.s}.set_limit($1, $2, $3, $4, $5, $6)", self.board, limit.group,
                         limit.concurrency, limit.sequence, None if rate is None else rate.count,
                         None if rate is None else rate.period)

    async def clear_limit(self, group: str) -> bool:
        rows = await self._call("clear_limit", f"SELECT {self.s}.clear_limit($1, $2) AS found", self.board, group)
        return bool(rows[0]["found"])

    async def limits(self) -> list[GroupLimit]:
        """Every limit by group, with the group's claimed jobs and its unclaimed ones (ready or delayed)."""
        rows = await self._call("limits", f"SELECT * FROM {self.s}.limits($1)", self.board)
        return [GroupLimit(row["r_grp"], row["r_concurrency"], row["r_sequence"],
                           None if row["r_count"] is None else Rate(row["r_count"], row["r_period"]),
                           int(row["r_running"]), int(row["r_waiting"])) for row in rows]

    async def pause(self, name: str | None, on: bool) -> None:
        """Pause (``on``) or resume ``name``, or the whole board when ``name`` is ``None``."""
        await self._call("pause" if on else "resume", f"SELECT {self.s}.pause($1, $2, $3)", self.board, name, on)

    async def paused(self) -> Paused:
        rows = await self._call("paused", f"SELECT coalesce((SELECT paused FROM {self.s}.flow WHERE board = $1), "
                                          f"false) AS board, ARRAY(SELECT name FROM {self.s}.flow_pause WHERE "
                                          "board = $1) AS names", self.board)
        return Paused(bool(rows[0]["board"]), frozenset(rows[0]["names"]))
