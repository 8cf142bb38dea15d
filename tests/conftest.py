"""Shared fixtures: a real ZooKeeper server and a real Redis server for the whole test session.

``JOBBOARD_ZK_HOSTS`` (set by ``python -m tests.support.zkserver run``) names a
running server; without it, one is started here on a free loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def zk_hosts() -> Iterator[str]:
    from tests.support.zkserver import hosts_from_env_or_started

    with hosts_from_env_or_started() as hosts:
        yield hosts


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a real Redis server (no db or board root: tests add them)."""
    from tests.support.redisserver import url_from_env_or_started

    with url_from_env_or_started() as url:
        yield url
