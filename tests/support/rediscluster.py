"""A throwaway Redis Cluster on 127.0.0.1: three masters, each with one replica, and its failovers.

Six ``redis-server --cluster-enabled yes`` (each with its own data dir, client port and cluster-bus port,
``appendfsync always`` so that ``durability=strict`` boards accept them; ``everysec`` for the suite's shared
cluster, whose boards are not strict), joined by ``redis-cli --cluster
create ... --cluster-replicas 1``; :meth:`RedisCluster.start` returns once every node says
``cluster_state:ok`` and agrees on who serves every slot. :meth:`RedisCluster.failover` moves a slot's
master to its replica, gracefully (``CLUSTER FAILOVER`` on the replica) or by SIGKILL;
:meth:`RedisCluster.migrate` moves a slot to another master. The calls block:
run them in a thread from async tests. CLI: ``python -m tests.support.rediscluster run -- CMD ARGS...``
runs CMD with ``JOBBOARD_TEST_REDIS_CLUSTER`` naming the seed nodes (``127.0.0.1:p1,127.0.0.1:p2,...``) of a
cluster with ``appendfsync everysec``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, Self

import redis

from tests.support.failover import synchronised, until
from tests.support.localserver import HOST, free_ports, main, run_with
from tests.support.redisserver import RedisServer, ensure_redis_installed

ENV_VAR = "JOBBOARD_TEST_REDIS_CLUSTER"
NODE_TIMEOUT_MS = 2000
"""``cluster-node-timeout``: a master unreachable this long is failed over to its replica (about twice this)."""
START_WITHIN = 45.0


def client(port: int) -> redis.Redis:
    """An admin connection to one node (no redirections followed)."""
    return redis.Redis(host=HOST, port=port, socket_timeout=3.0, socket_connect_timeout=2.0)


class ClusterNode(RedisServer):
    """One cluster-enabled redis-server with its own cluster-bus port and ``nodes.conf``."""

    kind = "redis-cluster-node"

    def __init__(self, port: int, bus_port: int, appendfsync: str = "always", run_under: Sequence[str] = ()) -> None:
        super().__init__(port=port, appendfsync=appendfsync, run_under=run_under, start_timeout=120.0 if run_under else 20.0,
                         extra=["--cluster-enabled", "yes", "--cluster-port", str(bus_port),
                                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                                "--cluster-require-full-coverage", "no"])

    def role(self) -> str:
        """``master`` or ``slave`` (as the node says)."""
        with client(self.port) as node:
            return str(node.info("replication")["role"])


class RedisCluster:
    """Three masters and three replicas; see the module docstring."""

    def __init__(self, appendfsync: str = "always", masters_under: Sequence[str] = ()) -> None:
        """``appendfsync`` of every node: ``always`` lets ``durability=strict`` boards on it (an fsync a write,
        about 4 ms each here); ``everysec`` for clusters whose boards are not strict. ``masters_under``: a
        command the three first nodes (the masters ``redis-cli --cluster create`` makes) run under
        (``benchmarks.redis_spread_instructions``: callgrind)."""
        self.appendfsync = appendfsync
        self.masters_under = list(masters_under)
        self._stack = ExitStack()
        self.nodes: list[ClusterNode] = []
        self.failovers: list[str] = []
        """One line per failover done: how, from which port to which."""

    @property
    def seeds(self) -> str:
        """``127.0.0.1:p1,...`` of every node (a client may start from any)."""
        return ",".join(node.hosts for node in self.nodes)

    def url(self, root: str, **options: object) -> str:
        """A board URL on this cluster (``redis://<seeds>/0/<root>?cluster=1&...``)."""
        query = "&".join(f"{key}={value}" for key, value in {"cluster": 1, **options}.items())
        return f"redis://{self.seeds}/0/{root}?{query}"

    def __enter__(self) -> Self:
        ensure_redis_installed()
        ports = free_ports(12)
        with ExitStack() as stack:
            self.nodes = [stack.enter_context(ClusterNode(ports[i], ports[i + 6], self.appendfsync,
                                                          self.masters_under if i < 3 else ()))
                          for i in range(6)]
            subprocess.run(["redis-cli", "--cluster", "create", *[node.hosts for node in self.nodes],
                            "--cluster-replicas", "1", "--cluster-yes"],
                           check=True, capture_output=True, timeout=START_WITHIN)
            until(self.settled, "every node of the new cluster agreeing, cluster_state:ok", START_WITHIN)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _alive(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.running]

    def settled(self) -> bool:
        """Every running node says ``cluster_state:ok`` and names the same master for every slot, a running one
        (with, when all six nodes run, a replica in sync)."""
        maps = []
        for node in self._alive():
            with client(node.port) as admin:
                if b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
                    return False
                maps.append(_masters(admin.execute_command("CLUSTER", "SLOTS")))
        masters = set(maps[0].values())
        if not all(found == maps[0] for found in maps) or not all(self.by_port(port).running for port in masters):
            return False
        return len(self._alive()) < len(self.nodes) or all(self._replicated(port) for port in masters)

    def _replicated(self, port: int) -> bool:
        """Whether the master on ``port`` has a replica in sync."""
        with client(port) as admin:
            replicas = admin.execute_command("ROLE")[2]
        return any(synchronised(int(replica[1])) for replica in replicas)

    def by_port(self, port: int) -> ClusterNode:
        return next(node for node in self.nodes if node.port == port)

    def master_of(self, slot: int) -> ClusterNode:
        """The node serving ``slot`` (as the first running node says)."""
        with client(self._alive()[0].port) as admin:
            return self.by_port(_masters(admin.execute_command("CLUSTER", "SLOTS"))[slot])

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        """A running replica of ``master``."""
        with client(master.port) as admin:
            replicas = admin.execute_command("ROLE")[2]
        ports = {int(replica[1]) for replica in replicas}
        return next(node for node in self._alive() if node.port in ports)

    def slot_of(self, key: str) -> int:
        with client(self._alive()[0].port) as admin:
            return int(admin.execute_command("CLUSTER", "KEYSLOT", key))

    def failover(self, slot: int, how: str) -> None:
        """Move ``slot``'s master to its replica: ``graceful`` (``CLUSTER FAILOVER``), ``kill`` (SIGKILL of the
        master, restarted afterwards as a replica of the new one) or ``kill-last`` (not restarted)."""
        master = self.master_of(slot)
        replica = self.replica_of(master)
        started = time.monotonic()
        if how == "graceful":
            with client(replica.port) as admin:
                admin.execute_command("CLUSTER", "FAILOVER")
        else:
            master.kill()
        until(lambda: replica.role() == "master" and self.master_of(slot) is replica, f"{how} failover", 30)
        if how == "kill":
            master.start()  # its nodes.conf names it a master: the cluster demotes it to the new master's replica
            until(lambda: master.role() == "slave" and synchronised(master.port), "the old master as a replica", 30)
        until(self.settled, "the cluster settled after the failover", 30)
        self.failovers.append(f"{how}: {master.port} -> {replica.port} in {time.monotonic() - started:.1f} s")


    def migrate(self, slot: int, target: ClusterNode) -> int:
        """Move ``slot`` (its keys, then its ownership) from its master to the master ``target``, as
        ``redis-cli --cluster reshard`` does: ``SETSLOT IMPORTING``/``MIGRATING``, ``MIGRATE`` in batches of
        100 keys, ``SETSLOT NODE`` on every master. Returns the number of keys moved."""
        source = self.master_of(slot)
        started, moved = time.monotonic(), 0
        with client(source.port) as src, client(target.port) as dst:
            source_id, target_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", HOST, target.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
            for port in [target.port, source.port, *self._master_ports() - {target.port, source.port}]:
                with client(port) as master:
                    master.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        until(lambda: self.master_of(slot) is target and self.settled(), "the migrated slot's new master", 30)
        self.failovers.append(f"migrate slot {slot} ({moved} keys): {source.port} -> {target.port} in "
                              f"{time.monotonic() - started:.1f} s")
        return moved

    def error_replies(self, code: str) -> int:
        """How many ``code`` error replies (``ASK``, ``MOVED``...) the running nodes sent (``INFO errorstats``)."""
        total = 0
        for node in self._alive():
            with client(node.port) as admin:
                total += int(admin.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))
        return total

    def _master_ports(self) -> set[int]:
        with client(self._alive()[0].port) as admin:
            return set(_masters(admin.execute_command("CLUSTER", "SLOTS")).values())


def _masters(slots: Any) -> dict[int, int]:
    """``CLUSTER SLOTS`` as {slot: port of its master} (every slot served)."""
    return {slot: int(entry[2][1]) for entry in slots for slot in range(int(entry[0]), int(entry[1]) + 1)}


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` with ``JOBBOARD_TEST_REDIS_CLUSTER`` naming a fresh cluster's nodes; return its exit code.
    The suite's boards on it are not strict (the failover tests that are start clusters of their own)."""
    cluster = RedisCluster(appendfsync="everysec")
    try:
        return run_with(cluster, lambda: {ENV_VAR: cluster.seeds}, cmd,
                        lambda: f"rediscluster: Redis Cluster serving on {cluster.seeds}")
    except subprocess.SubprocessError as exc:  # redis-cli --cluster create failed: said in one line
        raise RuntimeError(str(exc)) from exc


if __name__ == "__main__":
    sys.exit(main("rediscluster", ENV_VAR, lambda cmd, args: run(cmd)))
