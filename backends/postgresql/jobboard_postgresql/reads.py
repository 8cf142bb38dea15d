"""Reads of a ``postgresql://`` board: plain statements on the pool, never holding a transaction open.

Listings page through the board in priority-then-age order (keyset pages of :data:`PAGE` rows over the
``(board, rank, id)`` index), so a long listing never pins the xmin horizon (no bloat from readers).
A row whose posting does not decode is skipped and reported (``report``), never raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import asyncpg

from jobboard.backend import (
    Entity,
    Job,
    JobState,
    ListedJob,
    MalformedEntry,
    Outcome,
    TrashedJob,
    decode_value,
)
from jobboard.errors import JobNotFound
from jobboard_postgresql.database import Database
from jobboard_postgresql.flow import GATE
from jobboard_postgresql.rows import row_job
from jobboard_postgresql.writes import is_job_id

PAGE = 500
JOB_COLUMNS = "id, state, owner, posting, attempts, not_before, last_error, progress, key"
STATES = {0: JobState.UNCLAIMED, 3: JobState.UNCLAIMED, 1: JobState.CLAIMED, 2: JobState.WAITING}
CLAIMABLE = "(state = 0 OR (state = 3 AND not_before <= {s}.now()))"
NAMES = "CASE WHEN $2::text[] IS NULL THEN left(name, 9) <> 'jobboard.' ELSE name = ANY($2::text[]) END"


class Reader:
    """The reads of one board."""

    def __init__(self, db: Database, board: str, schema: str, report: Callable[[str, str], None]) -> None:
        self.db, self.board, self.s, self.report = db, board, f'"{schema}"', report
        self.result_ttl, self.trash_ttl = 0.0, 0.0

    async def fetch(self, what: str, query: str, *args: Any) -> list[Any]:
        async def call(connection: asyncpg.Connection, retry: bool) -> list[Any]:
            return list(await connection.fetch(query, *args))

        return await self.db.run(what, call)

    def decoded(self, row: Any) -> Job | None:
        try:
            return row_job(row)
        except MalformedEntry as error:
            self.report(str(row["id"]), str(error))
            return None

    async def one(self, job_id: str) -> Any:
        if not is_job_id(job_id):
            return None
        rows = await self.fetch("get", f"SELECT {JOB_COLUMNS} FROM {self.s}.job WHERE id = $1 AND board = $2 "
                                       "AND state <> 9", int(job_id), self.board)
        return rows[0] if rows else None

    async def get(self, job_id: str) -> Job:
        row = await self.one(job_id)
        job = None if row is None else self.decoded(row)
        if job is None:
            raise JobNotFound(f"job {job_id} is not on the board")
        return job

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        states = "(0, 3)" if only_unclaimed else "(0, 1, 2, 3)"
        after = (-1, 0)
        while True:
            rows = await self.fetch("iterjobs", f"SELECT {JOB_COLUMNS}, rank FROM {self.s}.job WHERE board = $1 AND "
                                                f"state IN {states} AND (rank, id) > ($2, $3) ORDER BY rank, id "
                                                f"LIMIT {PAGE}", self.board, *after)
            for row in rows:
                job = self.decoded(row)
                if job is not None:
                    state = STATES[row["state"]]
                    yield ListedJob(job, state, row["owner"] if state is JobState.CLAIMED else None)
            if len(rows) < PAGE:
                return
            after = (rows[-1]["rank"], rows[-1]["id"])

    async def state(self, job_id: str) -> JobState:
        if not is_job_id(job_id):
            return JobState.COMPLETE
        rows = await self.fetch("state", f"SELECT state FROM {self.s}.job WHERE id = $1 AND board = $2 UNION ALL "
                                         f"SELECT 8 FROM {self.s}.trash WHERE id = $1 AND board = $2 AND "
                                         f"{self._live_trash('$3')}", int(job_id), self.board, self.trash_ttl)
        if not rows:
            return JobState.COMPLETE
        return JobState.TRASHED if rows[0]["state"] == 8 else STATES.get(rows[0]["state"], JobState.COMPLETE)

    def _live_trash(self, ttl: str) -> str:
        return f"(coalesce(trash_ttl, {ttl}) = 0 OR trashed_at + coalesce(trash_ttl, {ttl}) > {self.s}.now())"

    async def owner(self, job_id: str) -> str | None:
        row = await self.one(job_id)
        return None if row is None or row["state"] != 1 else str(row["owner"])

    async def job_count(self) -> int:
        rows = await self.fetch("job_count", f"SELECT count(*) AS n FROM {self.s}.job WHERE board = $1 AND state <> 9",
                                self.board)
        return int(rows[0]["n"])

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        after = (-1.0, 0)
        while True:
            rows = await self.fetch("trashed", f"SELECT id, posting, attempts, not_before, last_error, NULL AS progress, "
                                               f"key, reason, trashed_at FROM {self.s}.trash WHERE board = $1 AND "
                                               f"(trashed_at, id) > ($2, $3) AND {self._live_trash('$4')} "
                                               f"ORDER BY trashed_at, id LIMIT {PAGE}", self.board, *after,
                                    self.trash_ttl)
            for row in rows:
                job = self.decoded(row)
                if job is not None:
                    yield TrashedJob(job, row["reason"], row["trashed_at"])
            if len(rows) < PAGE:
                return
            after = (rows[-1]["trashed_at"], rows[-1]["id"])

    async def outcome(self, job_id: str) -> Outcome | None:
        """How the job ended (expired results and trash entries are not shown), or ``None`` while on the board."""
        if not is_job_id(job_id):
            return Outcome(job_id, JobState.COMPLETE)
        rows = await self.fetch(
            "wait_for_completion",
            f"SELECT 0 AS kind, NULL AS reason, NULL::bytea AS result FROM {self.s}.job WHERE id = $1 AND state <> 9 "
            f"UNION ALL SELECT 1, reason, NULL FROM {self.s}.trash WHERE id = $1 AND board = $2 "
            f"AND {self._live_trash('$4')} UNION ALL SELECT 2, NULL, result FROM {self.s}.kept WHERE id = $1 AND "
            f"board = $2 AND (coalesce(ttl, $3) = 0 OR at + coalesce(ttl, $3) > {self.s}.now()) ORDER BY 1",
            int(job_id), self.board, self.result_ttl, self.trash_ttl)
        if rows and rows[0]["kind"] == 0:
            return None
        if rows and rows[0]["kind"] == 1:
            return Outcome(job_id, JobState.TRASHED, reason=rows[0]["reason"])
        result = rows[0]["result"] if rows else None
        return Outcome(job_id, JobState.COMPLETE, result=None if result is None else decode_value(result))

    async def claimable(self, names: Collection[str] | None) -> tuple[list[Job], float | None]:
        """Claimable jobs that flow control does not hold back, in board order (at most a page), and seconds
        until the next delayed job or rate permit is due (``jb.gate``: one call, nothing more without limits)."""
        wanted = None if names is None else list(names)
        rows = await self.fetch("wait", f"SELECT {JOB_COLUMNS.replace('id,', 'j.id,')}, g.o_due FROM "
                                        f"{self.s}.gate($1) g LEFT JOIN LATERAL (SELECT * FROM {self.s}.job j "
                                        f"WHERE j.board = $1 AND {CLAIMABLE.format(s=self.s)} AND {NAMES} AND {GATE} "
                                        f"ORDER BY rank, id LIMIT {PAGE}) j ON true ORDER BY j.rank, j.id", self.board, wanted)
        jobs = [job for row in rows if row["id"] is not None and (job := self.decoded(row)) is not None]
        if jobs or rows[0]["id"] is not None:
            return jobs, None
        due = await self.fetch("wait", f"SELECT min(not_before) - {self.s}.now() AS due FROM {self.s}.job "
                                       f"WHERE board = $1 AND state = 3 AND {NAMES}", self.board, wanted)
        dues = [value for value in (due[0]["due"], rows[0]["o_due"]) if value is not None]
        return jobs, (max(0.0, min(dues)) if dues else None)

    async def entities(self) -> list[Entity]:
        rows = await self.fetch("entities", f"SELECT name, metadata FROM {self.s}.entity WHERE board = $1 ORDER BY name",
                                self.board)
        return [Entity(row["name"], decode_value(row["metadata"])) for row in rows]
