"""``post_many``'s plain batches (no keys, links or delays) written by binary ``COPY`` into the job table.

One transaction: ``jb.post_head`` takes the batch's ids (ascending, in the batch's order), writes its
``posted`` events while a board of that name reads events, and wakes idle sessions (NOTIFY is delivered
at commit); then ``COPY ... FROM STDIN (FORMAT binary)`` writes the rows. The head's parameters are two
``text`` values (the names joined by newlines, which a checked name never holds; split by the server): no
array for asyncpg to check element by element, nor an array type to look up (its introspection query cost
a fresh connection 10-40 ms). The ``COPY`` data is built here, row by row, from each posting's stored bytes
and a per-batch cache of the columns its name, priority and options fix (:class:`Rows`): no record tuple per
row, no per-value encoding by the driver. Atomicity: all rows or none (in the board's own transaction, or in
the caller's asyncpg transaction; a caller's connection outside a transaction takes ``jb.post_plain``'s one
statement, which a cancellation cannot leave half done there). A posting with a delay goes through
``jb.post_plain`` (its state needs the server's clock). Errors: asyncpg's, to the caller (a value a column
cannot hold, such as a ``max_attempts`` over 2**31-1, raises asyncpg's ``DataError`` before anything is sent).
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Sequence

import asyncpg

from jobboard.backend import Job, Posting, Prepared
from jobboard.job import Priority

COLUMNS = ("id", "token", "posting", "board", "name", "rank", "state", "max_attempts", "keep_result", "result_ttl",
           "trash_ttl", "grp")
"""The columns a plain batch writes, in the order of its ``COPY`` rows: the three a posting owns, then the ones
its name, priority and options fix (state 0: ready; the rest take their defaults)."""
_RANKS = {member: member.rank for member in Priority}
"""``Priority.rank`` by member (a property call per row costs more than the lookup)."""
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
"""Binary ``COPY``'s header: its signature, no flags, no header extension."""
TRAILER = struct.pack(">h", -1)
_ROW_HEAD = struct.Struct(">hiqi16si")
"""A row's start: its column count, ``id`` (int8), ``token`` (uuid), the length of ``posting`` (bytea)."""
_NULL = struct.pack(">i", -1)
Fixed = tuple[str, Priority, int | None, bool, float | None, float | None, str | None]
"""What fixes a row's columns after ``posting``: name, priority, max_attempts, keep_result, the ttls, group."""
CHUNK_BYTES = 4 << 20
"""A ``COPY`` carries at most about this much (one message each): a larger batch takes several, in its transaction."""


def copyable(postings: Sequence[Posting]) -> bool:
    """Whether a plain batch can be copied: none of its postings has a delay."""
    return all(p.not_before is None for p in postings)


class Rows:
    """One batch's ``COPY`` data (owned by one call). :raises asyncpg.DataError: a value its column cannot hold."""

    def __init__(self, board: str) -> None:
        self.board = _text(board)
        self.fixed: dict[Fixed, bytes] = {}
        """The columns after ``posting`` by (name, priority, max_attempts, keep_result, ttls, group)."""

    def chunks(self, ids: Sequence[int], postings: Sequence[Posting], batch: Sequence[Prepared]) -> list[bytes]:
        """The rows in the batch's order, as one or more ``COPY`` payloads of about :data:`CHUNK_BYTES` at most."""
        fixed, head, fromhex, size = self.fixed, _ROW_HEAD.pack, bytes.fromhex, 0
        parts, chunks = [SIGNATURE], []
        append = parts.append
        for i, p, prepared in zip(ids, postings, batch, strict=True):
            raw = prepared.raw
            try:
                token = fromhex(p.token)
            except ValueError:
                token = _uuid(p.token)
            key = (p.name, p.priority, p.max_attempts, p.keep_result, p.result_ttl, p.trash_ttl, p.group)
            tail = fixed.get(key) or self._fixed(key)
            if len(token) != 16:
                token = _uuid(p.token)
            append(head(12, 8, i, 16, token, len(raw)))
            append(raw)
            append(tail)
            size += len(raw)
            if size > CHUNK_BYTES:
                append(TRAILER)
                chunks.append(b"".join(parts))
                parts, size = [SIGNATURE], 0
                append = parts.append
        append(TRAILER)
        chunks.append(b"".join(parts))
        return chunks

    def _fixed(self, key: Fixed) -> bytes:
        name, priority, max_attempts, keep_result, result_ttl, trash_ttl, group = key
        try:
            made = b"".join((self.board, _text(name), struct.pack(">ihih", 2, _RANKS[priority], 2, 0),
                             _NULL if max_attempts is None else struct.pack(">ii", 4, max_attempts),
                             struct.pack(">i?", 1, bool(keep_result)), _float(result_ttl), _float(trash_ttl),
                             _NULL if group is None else _text(group)))
        except (struct.error, TypeError, KeyError, AttributeError, UnicodeEncodeError) as error:
            raise asyncpg.DataError(f"post_many: a posting's columns cannot be written: {error}") from None
        self.fixed[key] = made
        return made


def _uuid(token: str) -> bytes:
    """Another spelling of a uuid (dashes, braces). :raises asyncpg.DataError: not one."""
    try:
        return uuid.UUID(token).bytes
    except ValueError:
        raise asyncpg.DataError(f"post_many: a posting's token is not a uuid: {token!r}") from None


def _text(value: str) -> bytes:
    encoded = value.encode()
    return struct.pack(">i", len(encoded)) + encoded


def _float(value: object) -> bytes:
    return _NULL if value is None else struct.pack(">id", 8, value)


class Copier:
    """Writes the plain batches of one board (its schema and name) by ``COPY``."""

    def __init__(self, schema: str, board: str) -> None:
        self.schema, self.board = schema, board
        self.head = f'SELECT "{schema}".post_head($1::text, string_to_array($2::text, E\'\\n\'), $3::uuid)'
        self.head_array = f'SELECT "{schema}".post_head($1::text, $2::text[], $3::uuid)'
        """For names holding a newline (none the board checked): the names as an array."""

    async def write(self, connection: asyncpg.Connection, batch: Sequence[Prepared],
                    postings: Sequence[Posting]) -> list[Job]:
        """Write the batch in ``connection``'s open transaction, or in one of its own; returns its jobs in order."""
        if connection.is_in_transaction():
            return await self._write(connection, batch, postings)
        async with connection.transaction():
            return await self._write(connection, batch, postings)

    async def _write(self, connection: asyncpg.Connection, batch: Sequence[Prepared],
                     postings: Sequence[Posting]) -> list[Job]:
        """The head, then the rows. The jobs are built while the server writes the rows: asyncpg sends the first
        payload before its first wait (the copy task's first step), so the two cores work at once."""
        names = [p.name for p in postings]
        joined = "\n".join(names)
        if joined.count("\n") == len(names) - 1:
            digits = (await connection.fetchval(self.head, self.board, joined, postings[0].token)).split(",")
        else:  # the first token: the batch's fence (jb.fence)
            digits = (await connection.fetchval(self.head_array, self.board, names, postings[0].token)).split(",")
        ids = list(map(int, digits))
        copy = asyncio.ensure_future(self._copy(connection, Rows(self.board).chunks(ids, postings, batch)))
        try:
            await asyncio.sleep(0)  # the copy task's first step: the rows are sent
            jobs = [p.to_job(d, i) for p, d, i in zip(postings, digits, ids, strict=True)]
        except BaseException:  # cancelled: the copy goes too, before the transaction's rollback
            copy.cancel()
            await asyncio.wait({copy})
            raise
        await copy  # its error, if any, is the call's (and rolls the transaction back)
        return jobs

    async def _copy(self, connection: asyncpg.Connection, chunks: list[bytes]) -> None:
        for chunk in chunks:  # a memoryview: asyncpg would take bytes for a file's path
            await connection.copy_to_table("job", schema_name=self.schema, columns=COLUMNS, source=memoryview(chunk),
                                           format="binary")


def written(postings: Sequence[Posting], ids: Sequence[int]) -> list[Job]:
    """The jobs a plain batch wrote, with their ids in the batch's order."""
    return [p.to_job(str(i), i) for p, i in zip(postings, ids, strict=True)]
