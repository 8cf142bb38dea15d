"""Review C's C2 and C6: client_wire.connect closes its connection when cancelled (a probe of a frozen master,
the kernel accepting and nothing answering, cancelled by the board's close left its socket open until the reply
timeout); a reply_timeout past the docs' bound (2/3 of session_timeout less 0.5 s) is warned about."""

from __future__ import annotations

import asyncio
import logging

import pytest

from jobboard_redis.client_wire import connect
from jobboard_redis.options import parse_redis_url

pytestmark = pytest.mark.timeout(30)


async def test_a_cancelled_connect_closes_its_connection() -> None:
    """A listener that reads and never answers stands for the frozen master: the connect waiting for its
    hello's reply is cancelled, and the listener sees the connection closed at once (before: at the reply
    timeout, 20 s here, or never if the loop ended first)."""
    arrived: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def frozen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await arrived.put(reader)

    server = await asyncio.start_server(frozen, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        probe = asyncio.create_task(connect("127.0.0.1", port, reply_timeout=20.0, connect_timeout=20.0,
                                            tls=None, hello=[["PING"]]))
        reader = await asyncio.wait_for(arrived.get(), 10)
        assert b"PING" in await asyncio.wait_for(reader.readuntil(b"PING\r\n"), 10)  # the hello waits
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the cancelled connect's socket stays open"


@pytest.mark.parametrize(("query", "warned"), [
    ("session_timeout=10&reply_timeout=6", False), ("session_timeout=10&reply_timeout=6.5", True),
    ("session_timeout=3&reply_timeout=2", True), ("session_timeout=3", False),  # the default: documented
])
def test_a_reply_timeout_past_the_bound_is_warned_about(caplog: pytest.LogCaptureFixture, query: str,
                                                          warned: bool) -> None:
    with caplog.at_level(logging.WARNING, logger="jobboard_redis.options"):
        parse_redis_url(f"redis://127.0.0.1:6379/0/b?{query}")
    assert any("reply_timeout=" in record.getMessage() for record in caplog.records) is warned
