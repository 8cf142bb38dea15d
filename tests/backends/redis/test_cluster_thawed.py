"""A Redis Cluster master the cluster has agreed failed is not used again when it thaws (review C's C3).

A master frozen (SIGSTOP) past the cluster's node timeout is flagged ``fail`` by agreement, and its replica is
promoted about a second later. Thawed in between, it answers a probe; it used to be taken again at once, while
every node still named it the slot's master: what it acknowledged until its demotion was lost with it (default
durability). Now a master that answered a probe is still passed over while the cluster flags it ``fail`` (agreed)
within ``SILENT_FOR`` of its silence; a mere suspicion (``fail?``, one node's view) or no flag lets it be used,
as a healthy master that stalled past the reply timeout must be (tests/backends/redis/test_cluster_stall.py).

The probe is a real ``PING`` to a real server (a plain redis-server answers it as a thawed master does); the
cluster's flag is what ``CLUSTER NODES`` says, parsed by :func:`~jobboard_redis.cluster.flag`."""

from __future__ import annotations

import anyio
import pytest

from jobboard_redis.cluster import SlotMap, flag
from jobboard_redis.options import parse_redis_url

pytestmark = pytest.mark.timeout(30)

NODES = """\
07c3 127.0.0.1:7001@17001 master,fail - 1700000000000 1700000000000 1 connected 0-5460
1a2b 127.0.0.1:7002@17002 myself,master - 0 1700000000000 2 connected 5461-10922
3c4d 127.0.0.1:7003@17003 master,fail? - 1700000000000 1700000000000 3 connected 10923-16383
5e6f 127.0.0.1:7004@17004 slave 07c3 0 1700000000000 1 connected
"""


def test_cluster_nodes_flags_are_told_apart() -> None:
    assert flag(NODES, ("127.0.0.1", 7001), "127.0.0.1") == "fail"
    assert flag(NODES, ("127.0.0.1", 7003), "127.0.0.1") == "fail?"
    assert flag(NODES, ("127.0.0.1", 7002), "127.0.0.1") == ""
    assert flag(NODES.encode(), ("127.0.0.1", 7001), "127.0.0.1") == "fail"
    assert flag(NODES, ("127.0.0.1", 7999), "127.0.0.1") == ""


async def test_a_thawed_master_is_passed_over_only_while_the_cluster_agrees_it_failed(redis_url: str) -> None:
    options = parse_redis_url(redis_url)
    host, port = options.host, options.port
    node = (host, port)
    slots = SlotMap([node], 0, tls=None, hello=[], reply_timeout=0.5)
    try:
        slots.silent(f"{host}:{port}")
        assert slots._passed_over(node, "")  # silent within the reply timeout: not tried yet
        with anyio.fail_after(10):
            assert await slots._answers(node)  # thawed: it answers the probe
        assert not slots._passed_over(node, ""), "a master that answered and is not flagged is used again"
        assert not slots._passed_over(node, "fail?"), "one node's suspicion does not outweigh the probe"
        assert slots._passed_over(node, "fail"), ("a master the cluster agreed failed is not used again before its "
                                                  "failover (what it acknowledged would be lost with it)")
        other = (host, port + 1)
        assert not slots._passed_over(other, "fail"), "a master never silent here is tried whatever its flag"
    finally:
        slots.close()
