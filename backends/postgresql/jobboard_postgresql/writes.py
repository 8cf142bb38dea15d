"""Every write of a ``postgresql://`` board: one function call each (one transaction, one round trip).

Atomicity and fencing live in the functions (:mod:`jobboard_postgresql.functions`). Here: the arguments,
the answers turned into records or the contract's errors, and what a retried call passes so that it
finds its first attempt (``retry``: a post's token, a claim's nonce, a settle's evidence). Errors:
``ClaimLost`` / ``NotOwner`` from a settle's fence, ``AlreadyClaimed`` / ``NotClaimable`` /
``JobNotFound`` from a claim, ``DependencyMissing`` from a post, ``BackendUnavailable`` after the retry
window (:class:`~jobboard_postgresql.database.Database`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from jobboard.backend import (
    Claim,
    DependencyMissing,
    Job,
    Posting,
    Prepared,
    Progress,
    Settle,
    SettleAction,
)
from jobboard.errors import (
    AlreadyClaimed,
    ClaimLost,
    InvalidJob,
    JobNotFound,
    NotClaimable,
    NotOwner,
    Unsupported,
)
from jobboard_postgresql.bulk import Copier, copyable, written
from jobboard_postgresql.database import Database
from jobboard_postgresql.flow import held_back
from jobboard_postgresql.rows import claim_of, encode_error, encode_progress, job_of, post_arguments
from jobboard_postgresql.transactional import caller_errors, driver_of, fetch_on

PLAIN_QUERY = ("SELECT jb.post_plain($1::text, $2::text[], $3::smallint[], $4::int[], $5::float8[], $6::uuid[], "
               "$7::boolean[], $8::float8[], $9::float8[], $10::bytea[], $11::text[]) AS ids")
MANY_QUERY = ("SELECT * FROM jb.post_many($1::text, $2::text[], $3::smallint[], $4::int[], $5::float8[], $6::text[], "
              "$7::uuid[], $8::boolean[], $9::float8[], $10::float8[], $11::text[], $12::bytea[], $13::float8, "
              "$14::boolean, $15::text[])")

CLAIM_COLUMNS = "r_gen, r_attempts, r_posting, r_last_error, r_key, r_parents, r_results"


def is_job_id(text: str) -> bool:
    """Ids here are the decimal form of a positive bigint."""
    return text.isascii() and text.isdigit() and len(text) <= 18 and text[0] != "0"


class Writer:
    """The writes of one board (its name, schema and session are the backend's)."""

    def __init__(self, db: Database, board: str, schema: str, ns: int) -> None:
        self.db, self.board, self.s, self.ns = db, board, f'"{schema}"', ns
        self.session_of: Callable[[], int] = lambda: 0
        """The board's current session id (read at each attempt of a call: a retry after a renewal uses the new one)."""
        self.key_retention = 86400.0
        self.copier = Copier(schema, board)

    @property
    def session_id(self) -> int:
        return self.session_of()

    # -- posts ---------------------------------------------------------------

    def _missing_dependency(self, prepared: Prepared) -> DependencyMissing | None:
        bad = [dep for dep in prepared.posting.depends_on if not is_job_id(dep)]
        return DependencyMissing.of(prepared.posting.name, ", ".join(bad)) if bad else None

    def post_call(self) -> str:
        return (f"SELECT * FROM {self.s}.post($1::text, $2::text, $3::smallint, $4::int, $5::float8, $6::text, "
                "$7::uuid, $8::boolean, $9::float8, $10::float8, $11::bigint[], $12::bytea, $13::float8, $14::boolean, "
                "$15::text)")

    def post_args(self, prepared: Prepared, retry: bool) -> tuple[Any, ...]:
        return (self.board, *post_arguments(prepared.posting), prepared.raw, self.key_retention, retry,
                prepared.posting.group)

    async def post(self, prepared: Prepared) -> tuple[Job, bool]:
        """Write one posting; returns the job and whether it was written now (not found by its key or token)."""
        missing = self._missing_dependency(prepared)
        if missing is not None:
            raise missing

        if prepared.connection is not None:
            rows = await fetch_on(prepared.connection, "post", self.post_call(), self.post_args(prepared, False))
            return posted(prepared, rows[0])

        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchrow(self.post_call(), *self.post_args(prepared, retry))

        return posted(prepared, await self.db.run("post", call))

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """Write a batch in one call, in order, stopping at a missing dependency (``DependencyMissing``
        with ``index`` and ``posted``): every posting is its own unit, the call one transaction. A batch
        without keys or links is written by ``COPY`` (or one ``jb.post_plain`` call); a retried one goes
        posting by posting, finding each first attempt's job by its token. Returns the jobs in order."""
        postings = [p.posting for p in batch]
        if not any(p.depends_on for p in postings):
            if not postings:
                return []
            if not any(p.key is not None for p in postings):
                return await self._post_plain(batch, postings)
        for index, prepared in enumerate(batch):
            if (missing := self._missing_dependency(prepared)) is not None:
                before = await self.post_many(batch[:index]) if index else []
                raise missing.in_batch(index, before)
        columns = [list(column) for column in zip(*(post_arguments(p) for p in postings), strict=True)]
        raws, groups = [p.raw for p in batch], [p.group for p in postings]
        if batch[0].connection is not None:
            rows = await fetch_on(batch[0].connection, "post_many", self._many_query,
                                  self._many_args(columns, raws, groups, False))
        else:
            rows = await self.db.run("post_many", lambda connection, retry: self._post_many_rows(
                connection, columns, raws, groups, retry))
        return self._posted_rows(batch, rows)

    async def _post_plain(self, batch: Sequence[Prepared], postings: list[Posting]) -> list[Job]:
        """A batch without keys or links: by ``COPY`` (:mod:`jobboard_postgresql.bulk`) on an asyncpg connection,
        else one ``jb.post_plain`` call; a retry goes through ``jb.post_many``, finding each first attempt's job
        by its token."""
        if not copyable(postings):
            return await self._post_plain_call(batch, postings)
        if batch[0].connection is not None:
            driver = await driver_of(batch[0].connection)
            if not isinstance(driver, asyncpg.Connection) or not driver.is_in_transaction():
                # outside the caller's transaction one statement: a cancelled COPY would leave ours open there
                return await self._post_plain_call(batch, postings)
            with caller_errors("post_many"):
                return await self.copier.write(driver, batch, postings)

        async def copy_call(connection: asyncpg.Connection, retry: bool) -> list[Job]:
            if retry:
                return await self._retried_plain(connection, batch, postings)
            try:
                return await self.copier.write(connection, batch, postings)
            except BaseException:
                if not connection.is_closed() and connection.is_in_transaction():
                    connection.terminate()  # its rollback was cut short: the pool must not hand it out again
                raise

        return await self.db.run("post_many", copy_call)

    async def _retried_plain(self, connection: asyncpg.Connection, batch: Sequence[Prepared],
                             postings: list[Posting]) -> list[Job]:
        """A plain batch again after a failure that may have committed it: each posting found by its token."""
        columns = [list(column) for column in zip(*(post_arguments(p) for p in postings), strict=True)]
        return self._posted_rows(batch, await self._post_many_rows(
            connection, columns, [p.raw for p in batch], [p.group for p in postings], True))

    async def _post_plain_call(self, batch: Sequence[Prepared], postings: list[Posting]) -> list[Job]:
        """A plain batch as one ``jb.post_plain`` call (delays; a caller's psycopg connection or one outside a
        transaction)."""
        plain = (self.board, [p.name for p in postings], [p.priority.rank for p in postings],
                 nulls([p.max_attempts for p in postings]), nulls([p.not_before for p in postings]),
                 [p.token for p in postings], [p.keep_result for p in postings] if any(
                     p.keep_result for p in postings) else None, nulls([p.result_ttl for p in postings]),
                 nulls([p.trash_ttl for p in postings]), [p.raw for p in batch], nulls([p.group for p in postings]))
        if batch[0].connection is not None:
            rows = await fetch_on(batch[0].connection, "post_many", self._plain_query, plain)
            return written(postings, rows[0]["ids"])

        async def plain_call(connection: asyncpg.Connection, retry: bool) -> list[Job]:
            if retry:  # the first attempt may have committed: look for each posting's token
                return await self._retried_plain(connection, batch, postings)
            return written(postings, await connection.fetchval(self._plain_query, *plain))

        return await self.db.run("post_many", plain_call)

    @property
    def _plain_query(self) -> str:
        return PLAIN_QUERY.replace("jb.", f"{self.s}.")

    @property
    def _many_query(self) -> str:
        return MANY_QUERY.replace("jb.", f"{self.s}.")

    def _many_args(self, columns: list[list[Any]], raws: list[bytes], groups: list[str | None],
                   retry: bool) -> tuple[Any, ...]:
        deps = [",".join(map(str, d)) if d else None for d in columns[9]]
        return (self.board, *columns[:9], deps, raws, self.key_retention, retry, groups)

    async def _post_many_rows(self, connection: asyncpg.Connection, columns: list[list[Any]], raws: list[bytes],
                              groups: list[str | None], retry: bool) -> list[Any]:
        return list(await connection.fetch(self._many_query, *self._many_args(columns, raws, groups, retry)))

    @staticmethod
    def _posted_rows(batch: Sequence[Prepared], rows: list[Any]) -> list[Job]:
        """The jobs of ``jb.post_many``'s rows. :raises DependencyMissing: at the row that names one."""
        done: list[Job] = []
        for index, row in enumerate(rows):
            if row["r_missing"] is not None:
                raise DependencyMissing.of(batch[index].posting.name, row["r_missing"]).in_batch(index, done)
            done.append(posted(batch[index], row)[0])
        return done

    # -- claims --------------------------------------------------------------

    async def claim(self, job_id: str, owner: str) -> tuple[Claim, int]:
        """The claim, and the session it was made under."""
        if not is_job_id(job_id):
            raise JobNotFound(f"job {job_id} is not on the board")
        nonce, used = str(uuid.uuid4()), [0]

        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            used[0] = self.session_id
            return await connection.fetchrow(f"SELECT * FROM {self.s}.claim($1, $2, $3, $4, $5, $6::uuid, $7)",
                                             self.board, self.ns, used[0], owner, int(job_id), nonce, retry)

        row = await self.db.run("claim", call)
        status, detail = row["r_status"], row["r_detail"]
        if status == 1:
            raise JobNotFound(f"job {job_id} is not on the board")
        if status == 2:
            raise NotClaimable(f"job {job_id} is waiting for {detail} dependencies")
        if status == 3:
            raise AlreadyClaimed(f"job {job_id} is claimed by {detail}")
        if status == 4:
            raise NotClaimable(f"job {job_id} is delayed for {detail}s")
        if status == 5:
            raise JobNotFound(f"job {job_id} used its {detail} attempts and was moved to the trash")
        if status == 6:
            raise held_back(job_id, detail)
        return claim_of(int(job_id), owner, row), used[0]

    async def set_aside(self, job_id: int) -> None:
        """Take a malformed row out of every claim path (state 9); it stays until cancelled or purged by hand."""
        async def call(connection: asyncpg.Connection, retry: bool) -> None:
            await connection.execute(f"UPDATE {self.s}.job SET state = 9, session = NULL, owner = NULL WHERE id = $1",
                                     job_id)

        await self.db.run("set_aside", call)

    # -- settles -------------------------------------------------------------

    async def settle(self, claim: Claim, settle: Settle) -> None:
        """One fenced write. :raises ClaimLost: / :raises NotOwner: nothing changed."""
        job_id = int(claim.job.id) if is_job_id(claim.job.id) else 0
        head = (self.board, self.ns, self.session_id, job_id, claim.generation, claim.owner)
        args: tuple[Any, ...]
        fence = "$1::text, $2::int, $3::bigint, $4::bigint, $5::bigint, $6::text"
        if settle.action is SettleAction.CONSUME:
            query, args = f"consume({fence}, $7::bytea, $8::boolean)", (settle.encoded_result,)
        elif settle.action is SettleAction.ABANDON:
            query = f"release({fence}, $7::float8, $8::bytea, $9::boolean)"
            args = (settle.retry_after, encode_error(settle.error))
        else:
            query, args = f"trash({fence}, $7::text, $8::bytea, $9::boolean)", (settle.reason, encode_error(settle.error))
        if settle.connection is not None:
            if settle.action is not SettleAction.CONSUME:
                raise Unsupported("postgresql:// settles in the caller's transaction only to consume (transactional "
                                  "completion): an abandon or a trash is the worker's failure path, which must not "
                                  "depend on the application's transaction committing")
            rows = await fetch_on(settle.connection, "consume", f"SELECT * FROM {self.s}.{query}", (*head, *args, False))
            fenced(claim, rows[0])
            return

        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchrow(f"SELECT * FROM {self.s}.{query}", *head, *args, retry)

        fenced(claim, await self.db.run(settle.action.value, call))

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        job_id = int(claim.job.id) if is_job_id(claim.job.id) else 0

        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchrow(f"SELECT * FROM {self.s}.progress($1, $2, $3, $4, $5, $6)", self.board,
                                             self.ns, job_id, claim.generation, claim.owner, encode_progress(progress))

        fenced(claim, await self.db.run("report_progress", call))

    async def cancel(self, job_id: str, reason: str) -> None:
        async def call(connection: asyncpg.Connection, retry: bool) -> bool:
            return bool(await connection.fetchval(f"SELECT {self.s}.cancel($1, $2, $3, $4)", self.board,
                                                  self.session_id, int(job_id), reason))

        if not is_job_id(job_id) or not await self.db.run("cancel", call):
            raise JobNotFound(f"job {job_id} is not on the board")

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            return await connection.fetchrow(f"SELECT * FROM {self.s}.requeue($1, $2, $3)", self.board, int(job_id),
                                             reset_attempts)

        row = await self.db.run("requeue", call) if is_job_id(job_id) else None
        if row is None or row["r_status"] == 1:
            raise JobNotFound(f"job {job_id} is not in the trash")
        if row["r_status"] == 2:
            raise InvalidJob(f"job {job_id} waits for {row['r_pending']} dependencies whose result never came (it was "
                             "trashed with a dependency): post it again instead")
        return job_of(int(job_id), row["r_posting"], row["r_attempts"], None, row["r_last_error"], None, row["r_key"])

    async def purge(self, older_than: float) -> int:
        async def call(connection: asyncpg.Connection, retry: bool) -> int:
            return int(await connection.fetchval(f"SELECT {self.s}.purge($1, $2)", self.board, older_than))

        return await self.db.run("purge", call)


def nulls(column: list[Any]) -> list[Any] | None:
    """``column``, or None (one NULL parameter, not an array of them) when every value is None."""
    return None if all(value is None for value in column) else column


def posted(prepared: Prepared, row: Any) -> tuple[Job, bool]:
    """The job a post function's row names, and whether this post wrote it."""
    if row["r_missing"] is not None:
        raise DependencyMissing.of(prepared.posting.name, row["r_missing"])
    if row["r_state"] != -1 and row["r_posting"] == prepared.raw:  # written now: no need to decode it back
        return prepared.posting.to_job(str(row["r_id"]), row["r_id"]), True
    return job_of(row["r_id"], row["r_posting"], row["r_attempts"], row["r_not_before"], row["r_last_error"],
                  row["r_progress"], row["r_key"]), False


def fenced(claim: Claim, row: Any) -> None:
    """:raises ClaimLost: status 1. :raises NotOwner: status 2."""
    if row["r_status"] == 1:
        raise ClaimLost(f"claim of job {claim.job.id} (generation {claim.generation}) is no longer current")
    if row["r_status"] == 2:
        raise NotOwner(f"job {claim.job.id} is owned by {row['r_detail']}, not {claim.owner}")
