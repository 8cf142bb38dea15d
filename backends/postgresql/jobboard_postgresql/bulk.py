"""``post_many``'s plain batches (no keys, links or delays) written by binary ``COPY`` into the job table.

One transaction: ``jb.post_head`` takes the batch's ids (ascending, in the batch's order), writes its
``posted`` events while a board of that name reads events, and wakes idle sessions (NOTIFY is delivered
at commit); then ``COPY ... FROM STDIN (FORMAT binary)`` writes the rows. Every parameter and column is a
scalar type or ``text[]``, which asyncpg encodes without asking the server about array types (its
introspection query costs a fresh connection 10-40 ms: the first bulk post of every pooled connection
paid it). Atomicity: all rows or none (in the board's own transaction, or in the caller's asyncpg
transaction; a caller's connection outside a transaction takes ``jb.post_plain``'s one statement, which a
cancellation cannot leave half done there). A posting with a delay goes through ``jb.post_plain`` (its state
needs the server's clock). Errors: asyncpg's, to the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg

from jobboard.backend import Job, Posting, Prepared
from jobboard.job import Priority

COLUMNS = ("id", "board", "name", "rank", "state", "max_attempts", "token", "keep_result", "result_ttl",
           "trash_ttl", "posting", "grp")
"""The columns a plain batch writes (state 0: ready; the rest take their defaults)."""
_RANKS = {member: member.rank for member in Priority}
"""``Priority.rank`` by member (a property call per row costs more than the lookup)."""


def copyable(postings: Sequence[Posting]) -> bool:
    """Whether a plain batch can be copied: none of its postings has a delay."""
    return all(p.not_before is None for p in postings)


class Copier:
    """Writes the plain batches of one board (its schema and name) by ``COPY``."""

    def __init__(self, schema: str, board: str) -> None:
        self.schema, self.board = schema, board
        self.head = f'SELECT "{schema}".post_head($1::text, $2::text[])'

    async def write(self, connection: asyncpg.Connection, batch: Sequence[Prepared],
                    postings: Sequence[Posting]) -> list[tuple[Job, bool]]:
        """Write the batch in ``connection``'s open transaction, or in one of its own; returns its jobs in order."""
        if connection.is_in_transaction():
            return await self._write(connection, batch, postings)
        async with connection.transaction():
            return await self._write(connection, batch, postings)

    async def _write(self, connection: asyncpg.Connection, batch: Sequence[Prepared],
                     postings: Sequence[Posting]) -> list[tuple[Job, bool]]:
        """The head, then the rows. The jobs are built while the server writes the rows: asyncpg sends every
        row before its first wait (the copy task's first step), so the two cores work at once."""
        digits = (await connection.fetchval(self.head, self.board, [p.name for p in postings])).split(",")
        ids, board, ranks = list(map(int, digits)), self.board, _RANKS
        copy = asyncio.ensure_future(connection.copy_records_to_table(
            "job", schema_name=self.schema, columns=COLUMNS,
            records=[(i, board, p.name, ranks[p.priority], 0, p.max_attempts, p.token, p.keep_result, p.result_ttl,
                      p.trash_ttl, prepared.raw, p.group) for i, p, prepared in zip(ids, postings, batch, strict=True)]))
        try:
            await asyncio.sleep(0)  # the copy task's first step: the rows are sent
            jobs = [(p.to_job(d, i), True) for p, d, i in zip(postings, digits, ids, strict=True)]
        except BaseException:  # cancelled: the copy goes too, before the transaction's rollback
            copy.cancel()
            await asyncio.wait({copy})
            raise
        await copy  # its error, if any, is the call's (and rolls the transaction back)
        return jobs


def written(postings: Sequence[Posting], ids: Sequence[int]) -> list[tuple[Job, bool]]:
    """The jobs a plain batch wrote, with their ids in the batch's order."""
    return [(p.to_job(str(i), i), True) for p, i in zip(postings, ids, strict=True)]
