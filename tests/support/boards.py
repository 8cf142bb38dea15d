"""A fresh, empty board on one of the in-tree backends, for tests parametrized by backend."""

from __future__ import annotations

import uuid

import pytest

BACKENDS = ("memory", "zookeeper", "redis")


def fresh_board_url(request: pytest.FixtureRequest, prefix: str) -> str:
    """A new board named ``prefix-<random>`` on ``request.param`` (a name in :data:`BACKENDS`);
    the ZooKeeper and Redis servers come from the ``zk_hosts`` and ``redis_url`` fixtures."""
    name = f"{prefix}-{uuid.uuid4().hex}"
    if request.param == "memory":
        return f"memory://{name}"
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}/0/{name}?session_timeout=4"
    return f"zookeeper://{request.getfixturevalue('zk_hosts')}/{prefix}/{name}?session_timeout=4"
