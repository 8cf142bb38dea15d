"""redis:// on a real Redis Cluster (three masters, three replicas; ``?cluster=1``): the conformance suite,
unchanged, on a board whose keys live in one hash slot, and the client's routing (docs/backends/redis.md)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

import tests.backends.redis.test_conformance as single
from jobboard import open_board
from jobboard.errors import BackendUnavailable
from jobboard.testing.stateful import run_model_test
from jobboard_redis.cluster import key_slot
from jobboard_redis.options import parse_redis_url
from tests.support.localserver import free_ports
from tests.support.rediscluster import ENV_VAR, RedisCluster


@pytest.fixture(scope="session")
def cluster_seeds() -> Iterator[str]:
    """``host:port,...`` of a running Redis Cluster (``JOBBOARD_TEST_REDIS_CLUSTER``, else one started here)."""
    if seeds := os.environ.get(ENV_VAR):
        yield seeds
        return
    with RedisCluster(appendfsync="everysec") as cluster:  # as the CLI's: no board on it is strict
        yield cluster.seeds


class TestRedisClusterConformance(single.TestRedisConformance):
    @pytest.fixture
    def board_url(self, cluster_seeds: str) -> str:
        return f"redis://{cluster_seeds}/0/conformance-{uuid.uuid4().hex}?cluster=1&session_timeout=4"


def test_key_slot_is_the_clusters() -> None:
    """The slot the client computes for a board is the one Redis Cluster gives its keys (``CLUSTER KEYSLOT``
    values for these keys, from Redis 7.0.15)."""
    assert key_slot("jb:{jobboard}:") == key_slot("jobboard") == key_slot("x{jobboard}y")
    assert [key_slot(key) for key in ("foo", "bar", "{user1000}.following", "a{}b")] == [12182, 5061, 3443, 13694]


def test_the_url_names_seed_nodes() -> None:
    options = parse_redis_url("redis://127.0.0.1:7000,127.0.0.1:7001/0/b?cluster=1")
    assert options.cluster and options.seeds == (("127.0.0.1", 7000), ("127.0.0.1", 7001))
    for bad in ("redis://h:1,h:2/0/b", "redis://h:1/3/b?cluster=1", "redis://h:1/0/b?cluster=1&sentinel=s",
                "redis://h:1/0/b?cluster=maybe"):
        with pytest.raises(Exception, match="Cluster|cluster|sentinel|Sentinel"):
            parse_redis_url(bad)


@pytest.mark.timeout(60)
async def test_a_board_follows_its_slot_from_any_seed(cluster_seeds: str) -> None:
    """Whichever node the URL names first (a master of another slot, a replica), the board's calls reach the
    master of its slot: a job posted through one seed is claimed through another."""
    root = f"seeds-{uuid.uuid4().hex}"
    seeds = cluster_seeds.split(",")
    async with open_board(f"redis://{seeds[0]}/0/{root}?cluster=1") as first, \
            open_board(f"redis://{seeds[-1]}/0/{root}?cluster=1") as last:
        job = await first.post("j", {"n": 1}, keep_result=True)
        assert await last.owner(job) is None
        claim = await last.claim(job, "w")
        assert await first.owner(job) == "w"
        await last.consume(claim, "ok")
        assert (await first.wait_for_completion(job)).result == "ok"


@pytest.mark.timeout(240)
def test_a_cluster_board_follows_the_model(cluster_seeds: str) -> None:
    """The model-based test of the contract (``tests/testing/test_model_based.py``'s redis:// run) on the cluster."""
    run_model_test(lambda: f"redis://{cluster_seeds}/0/model-{uuid.uuid4().hex}?cluster=1&session_timeout=4",
                   examples=12)


@pytest.mark.timeout(30)
async def test_a_dead_seed_is_skipped_and_all_dead_is_nothing_listening(cluster_seeds: str) -> None:
    """A seed that refuses connections is passed over for the next; when every seed refuses, ``open`` raises
    ``BackendUnavailable`` within about a second, naming the cluster ("nothing listening")."""
    dead = [f"127.0.0.1:{port}" for port in free_ports(2)]
    async with open_board(f"redis://{dead[0]},{cluster_seeds}/0/dead-{uuid.uuid4().hex}?cluster=1") as board:
        await board.post("j")
        assert await board.job_count() == 1
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="Redis Cluster"):
        async with open_board(f"redis://{','.join(dead)}/0/dead?cluster=1"):
            pass
    assert time.monotonic() - started < 5.0
