"""Shared fixtures: a real ZooKeeper server and a real Redis server for the whole test session.

``JOBBOARD_ZK_HOSTS`` (set by ``python -m tests.support.zkserver run``) names a
running server; without it, one is started here on a free loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


SERIAL_FILES = frozenset({
    # Faults, kills, failovers and outages, with bounds on how long the product takes to ride them out.
    "tests/backends/postgresql/test_faults.py", "tests/backends/postgresql/test_partition.py",
    "tests/backends/postgresql/test_processes.py",
    "tests/backends/postgresql/test_retry_fence.py",
    "tests/backends/postgresql/test_session_renewal.py", "tests/backends/redis/test_cluster_failover.py",
    "tests/backends/redis/test_cluster_frozen.py", "tests/backends/redis/test_cluster_stall.py",
    "tests/backends/redis/test_frozen_server.py",
    "tests/backends/redis/test_failover.py", "tests/backends/redis/test_faults.py",
    "tests/backends/redis/test_relearn.py", "tests/backends/sqlite/test_fault_schedule.py",
    "tests/backends/sqlite/test_processes.py", "tests/backends/sqlite/test_review_s.py", "tests/backends/zookeeper/test_ensemble.py",
    "tests/backends/zookeeper/test_fault_schedule.py", "tests/backends/zookeeper/test_faults.py",
    "tests/backends/zookeeper/test_presumed_expiry.py", "tests/backends/zookeeper/test_review.py",
    "tests/cli/test_refused.py", "tests/plans/test_dag_zookeeper.py", "tests/worker/test_fault_injection.py",
    "tests/worker/test_faults.py", "tests/worker/test_flow_faults.py", "tests/worker/test_regressions.py",
    "tests/worker/test_prefetch.py", "tests/worker/test_prefetch_pipelined.py",
    "tests/worker/test_signals.py",
    # Kills, signals, a JVM ensemble or bounds of a second or two, found by a review of the parallel suite.
    "tests/backends/postgresql/test_flow.py", "tests/backends/redis/test_client.py",
    "tests/backends/sqlite/test_files.py", "tests/backends/zookeeper/test_flow.py",
    "tests/backends/zookeeper/test_partitions.py", "tests/backends/zookeeper/test_truthfulness.py",
    "tests/cli/test_worker.py", "tests/testing/test_zkserver_harness.py",
})
"""Files whose tests run one after another on one worker when the suite runs on several (scripts/test:
``-n 2 --dist loadfile``): the fault and timing tests, never two of them side by side."""


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and unused) without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with :data:`SERIAL_FILES` as one file: each file's tests run in order on one
    worker (with its module fixtures), and the serial files all on the same worker, one after another.
    Other ``--dist`` modes are pytest-xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    def scope_of(nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "serial" if path in SERIAL_FILES else path

    scheduler = LoadFileScheduling(config, log)
    scheduler._split_scope = scope_of  # a file's work unit, or the serial one
    return scheduler
