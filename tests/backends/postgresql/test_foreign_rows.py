"""A job row whose stored last error holds a number no board writes (an attempt of ``inf``): its decoding raised
``OverflowError``, not ``MalformedEntry``, so the claim the server made was lost to the read. Found in the tenth
session; the same class as redis://'s (tests/backends/redis/test_foreign_entries.py)."""

from __future__ import annotations

import uuid

import msgpack
import pytest

from jobboard import open_board
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)


async def test_a_last_error_that_overflows_is_malformed_not_a_lost_claim(postgresql_url: str) -> None:  # noqa: F811
    async with open_board(f"{postgresql_url}?board=foreign-{uuid.uuid4().hex}") as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        bad = await board.post("x")
        good = await board.post("x")
        error = msgpack.packb(["RuntimeError", "boom", "", float("inf"), 0.0])
        await backend.db.pool.execute(f'UPDATE "{backend.options.schema}".job SET last_error = $1 WHERE id = $2',
                                      error, int(bad.id))
        claim = await board.claim_next("w")  # OverflowError before: the claim of the bad row made, then lost
        assert claim is not None and claim.job.id == good.id
        await board.consume(claim)
        assert await board.owner(bad) is None
        assert await board.claim_next("w") is None  # the bad row is set aside, not handed out
