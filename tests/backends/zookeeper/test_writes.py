"""The ZooKeeper connection's writes: requests made in one loop turn go out a few at a time, in order."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import anyio
import pytest

from jobboard_zookeeper.zk_protocol import WRITE_EVERY, coalesce_writes

pytestmark = pytest.mark.timeout(10)


def _connection(sent: list[bytes], *, closing: bool = False) -> SimpleNamespace:
    transport = SimpleNamespace(is_closing=lambda: closing)
    return SimpleNamespace(writer=SimpleNamespace(write=sent.append, transport=transport))


async def test_a_busy_turn_sends_every_few_requests_at_once_and_the_rest_at_its_end() -> None:
    """The server starts on the first requests while the client still makes the rest (one send
    per turn made the two take turns)."""
    with anyio.fail_after(5):
        sent: list[bytes] = []
        conn = _connection(sent)
        coalesce_writes(conn)
        requests = [f"r{index};".encode() for index in range(2 * WRITE_EVERY + 1)]
        for index, request in enumerate(requests):
            conn.writer.write(request)
            assert len(sent) == (index + 1) // WRITE_EVERY  # sent within the turn
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(sent) == 3
        assert b"".join(sent) == b"".join(requests)
        conn.writer.write(b"alone;")  # a quiet turn: one send at its end
        assert len(sent) == 3
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sent[3:] == [b"alone;"]


async def test_nothing_is_sent_on_a_closing_connection() -> None:
    with anyio.fail_after(5):
        sent: list[bytes] = []
        conn = _connection(sent, closing=True)
        coalesce_writes(conn)
        for _ in range(WRITE_EVERY + 1):
            conn.writer.write(b"r;")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sent == []
