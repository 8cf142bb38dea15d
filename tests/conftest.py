"""Shared fixtures: a real ZooKeeper server and a real Redis server for the whole test session.

``JOBBOARD_ZK_HOSTS`` (set by ``python -m tests.support.zkserver run``) names a
running server; without it, one is started here on a free loopback port.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def zk_hosts() -> Iterator[str]:
    hosts = os.environ.get("JOBBOARD_ZK_HOSTS")
    if hosts:
        yield hosts
        return
    from tests.support.zkserver import ZooKeeperServer, ensure_zookeeper_installed

    ensure_zookeeper_installed()
    server = ZooKeeperServer()
    server.start()
    try:
        yield server.hosts
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a real Redis server (no db or board root: tests add them)."""
    url = os.environ.get("JOBBOARD_REDIS_URL")
    if url:
        yield url
        return
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    ensure_redis_installed()
    with RedisServer() as server:
        yield server.url("")
