"""The zookeeper:// tests' proxy: a TCP proxy to the session's ZooKeeper server, to cut a board's link."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.tcpproxy import TcpProxy


@pytest.fixture
async def proxy(zk_hosts: str) -> AsyncIterator[TcpProxy]:
    host, port = zk_hosts.rsplit(":", 1)
    async with TcpProxy(host, int(port)) as running:
        yield running
