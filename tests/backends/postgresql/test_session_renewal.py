"""postgresql://: a call that fails because the session it was sent under is gone (``JB001``) must not lose the
session that replaced it. Seen with a worker SIGSTOPped past its session timeout (tests/worker/
test_flow_faults.py): its in-flight claim, retried under the old id after the renewal, lost the new session
too, and the next one, and the worker failed its claims for seconds.
"""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import pytest

from jobboard import open_board
from jobboard.errors import BackendUnavailable
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(30)


async def test_a_call_under_a_replaced_session_does_not_lose_the_new_one(postgresql_url: str) -> None:  # noqa: F811
    url = f"{postgresql_url}?board=renewal-{uuid.uuid4().hex}&retry_window=0.3&session_timeout=2"
    async with open_board(url) as board:
        backend = board.backend
        assert isinstance(backend, PostgresBackend)
        old = backend.keeper.session_id
        backend.keeper.current().lose("the test drops it")
        with anyio.fail_after(5):
            await backend.keeper.renewed.wait()  # cleared by the loss, set by the renewal
        new = backend.keeper.session_id
        assert new != old
        query = f'SELECT * FROM "{backend.options.schema}".claim_next($1, $2, $3, $4, NULL, $5::uuid, false)'

        async def stale_call(connection: asyncpg.Connection, retry: bool) -> object:
            return await connection.fetch(query, backend.options.board, backend.options.ns, old, "w",
                                          str(uuid.uuid4()))

        with pytest.raises(BackendUnavailable, match="is gone"):
            await backend.db.run("a claim sent under the old session", stale_call)
        assert backend.keeper.session_id == new and not backend.keeper.current().lost
        await board.post("w")
        assert await board.claim_next("w") is not None
