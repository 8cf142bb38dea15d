"""A ZooKeeper session presumed expired (no server for a session timeout) that the restarted server
kept: the log says the expiry was presumed, then that the session survived. Real server, restarted."""

from __future__ import annotations

import logging
import re
import uuid

import anyio
import pytest

from jobboard import EventKind, open_board
from tests.support.zkserver import ZooKeeperServer

pytestmark = pytest.mark.timeout(90)
LOGGER = "jobboard_zookeeper.zk"


async def test_a_presumed_expiry_is_logged_as_presumed_and_the_surviving_session_as_survived(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with ZooKeeperServer() as server, anyio.fail_after(60):
        async with open_board(server.url(f"/presumed/{uuid.uuid4().hex}?session_timeout=4")) as board:
            stream = board.events()
            await board.post("a")
            server.kill()  # the server's data (and so the session) is kept on disk
            async for event in stream:
                if event.kind is EventKind.SESSION_EXPIRED:
                    break  # presumed: still no server after a session timeout; semantics unchanged
            await anyio.to_thread.run_sync(server.start)  # the server restores the session, with a new timeout
            with anyio.move_on_after(30):  # a new session would publish nothing: the log shows it
                async for event in stream:
                    if event.kind is EventKind.RECONNECTED:
                        break
    lines = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    session = r"ZooKeeper session 0x[0-9a-f]+: "
    presumed = [line for line in lines if re.fullmatch(session + "presumed expired .*", line)]
    survived = [line for line in lines if re.fullmatch(session + ".*presumed expired survived", line)]
    assert len(presumed) == 1 and len(survived) == 1, lines
    assert presumed[0].split(":")[0] == survived[0].split(":")[0]  # the same session
    assert not [line for line in lines if re.fullmatch(session + "(expired|reconnected)", line)], lines
