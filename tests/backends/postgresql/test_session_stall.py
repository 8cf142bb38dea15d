"""A board whose event loop is blocked past its session timeout loses its session by design (a silent owner);
the warning must say why in words an operator can act on, not only the driver's error."""

from __future__ import annotations

import logging
import time
import uuid

import anyio
import pytest

from jobboard import open_board
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)


async def test_a_session_lost_to_a_blocked_loop_is_reported_as_such(
        postgresql_url: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    url = f"{postgresql_url}?board=stall-{uuid.uuid4().hex}&session_timeout=1"
    with caplog.at_level(logging.WARNING, logger="jobboard_postgresql"), anyio.fail_after(30):
        async with open_board(url) as board:
            await board.post("x")
            time.sleep(3.5)  # noqa: ASYNC251 - the point: the whole loop blocked for 3.5 session timeouts
            with anyio.move_on_after(10):
                while not any("lost session" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
    lost = [r.getMessage() for r in caplog.records if "lost session" in r.getMessage()]
    assert lost, "the session outlived a loop blocked 3.5 session timeouts"
    assert "no heartbeat for" in lost[0] and "event loop blocked" in lost[0], lost[0]
