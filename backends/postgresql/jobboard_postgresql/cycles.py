"""One ``jb.cycle`` call for a batch of coalesced requests (:mod:`jobboard_postgresql.coalescing`).

The call is one transaction: each consume fenced as ``jb.consume`` does it (its own claim's
generation, owner and holder session, checked under its row lock), then one job claimed per request
that wants one (``FOR UPDATE SKIP LOCKED LIMIT k``, priority then age, the best job to the earliest
request; on a board with limits or pauses, one request at a time through ``jb.flow_next``, each checked
against its group's permits: :mod:`jobboard_postgresql.flow_sql`). Retried as a whole while failures are transient (``Database.run``), marked as a retry: each
consume finds its evidence, each claim its nonce. Errors: the batch's (``BackendUnavailable``,
``BoardConflict``), raised to every request of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from jobboard_postgresql.coalescing import Answer, Request
from jobboard_postgresql.database import Database


class Cycles:
    """Sends batches of one board (its name, schema and namespace) under its current session."""

    def __init__(self, db: Database, board: str, schema: str, ns: int, session_of: Callable[[], int]) -> None:
        self.db, self.board, self.ns, self.session_of = db, board, ns, session_of
        s = f'"{schema}"'
        self.query = (f"SELECT * FROM {s}.cycle($1::text, $2::int, $3::bigint, $4::boolean, $5::text[], "
                      "$6::bigint[], $7::bigint[], $8::text[], $9::bytea[], $10::boolean[], $11::uuid[])")
        self.claim_next = f"SELECT * FROM {s}.claim_next($1, $2, $3, $4, $5, $6::uuid, $7)"
        self.consume = f"SELECT * FROM {s}.consume($1, $2, $3, $4, $5, $6, $7, $8)"
        self.consume_next = f"SELECT * FROM {s}.consume_next($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::uuid)"

    async def send(self, batch: list[Request]) -> list[Answer]:
        """One answer per request, in order."""
        if len(batch) == 1:
            return [await self.one(batch[0])]
        consumes = [request.consume for request in batch]
        names = next((list(r.names) if r.names is not None else None for r in batch if r.claims), None)
        arrays = ([c[0] if c else None for c in consumes], [c[1] if c else None for c in consumes],
                  [r.owner for r in batch], [c[2] if c else None for c in consumes], [r.claims for r in batch],
                  [r.nonce for r in batch])
        used = [0]

        async def call(connection: asyncpg.Connection, retry: bool) -> list[Any]:
            used[0] = self.session_of()
            return list(await connection.fetch(self.query, self.board, self.ns, used[0], retry, names, *arrays))

        rows = await self.db.run("claim and consume", call)
        answers = [Answer(None, None, None, used[0]) for _ in batch]
        for row in rows:
            answer = answers[row["r_ord"] - 1]
            answer.held = row["r_held"] or answer.held
            if row["r_id"] is not None:
                answer.row = row
            elif row["r_status"] is not None:  # not a claim's row of held-back reasons alone
                answer.status, answer.detail = row["r_status"], row["r_detail"]
        return answers

    async def one(self, request: Request) -> Answer:
        """A request alone: its own function (``claim_next``, ``consume`` or ``consume_next``), cheaper for
        one than ``jb.cycle`` (no arrays to encode and unpack), with the same fence, retry and answer."""
        names = None if request.names is None else list(request.names)
        consume, used = request.consume, [0]

        async def call(connection: asyncpg.Connection, retry: bool) -> Any:
            used[0] = session = self.session_of()
            if consume is None:
                return await connection.fetchrow(self.claim_next, self.board, self.ns, session, request.owner, names,
                                                 request.nonce, retry)
            if request.claims:
                return await connection.fetchrow(self.consume_next, self.board, self.ns, session, *consume[:2],
                                                 request.owner, consume[2], retry, names, request.nonce)
            return await connection.fetchrow(self.consume, self.board, self.ns, session, *consume[:2], request.owner,
                                             consume[2], retry)

        row = await self.db.run("claim and consume", call)
        claimed = row if row is not None and request.claims and row["r_id"] is not None else None
        held = row["r_held"] if row is not None and request.claims else None
        if consume is None:
            return Answer(None, None, claimed, used[0], held)
        return Answer(row["r_status"], row["r_detail"], claimed, used[0], held)
