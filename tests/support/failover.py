"""Two Redis servers and three Sentinels on 127.0.0.1, and the failovers an operator sees.

:class:`SentinelGroup` starts a primary, one replica (``appendfsync always``, so ``durability=strict``
boards accept them) and three Sentinels (quorum 2), then performs failovers in the ways they happen:
the primary SIGKILLed (and, if asked, restarted as a replica of the new one), or a graceful
``SENTINEL FAILOVER``. Every step waits until the Sentinels name the new primary and it serves as one.
The calls block: run them in a thread from async tests.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Self

import redis

from tests.support.localserver import HOST
from tests.support.redisserver import RedisSentinel, RedisServer

SERVICE = "failover"
DOWN_AFTER_MS = 500


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=2.0, socket_connect_timeout=2.0)


def _until(done: object, what: str, timeout: float) -> None:
    """Poll ``done()`` until true. :raises AssertionError: not within ``timeout`` seconds."""
    assert callable(done)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if done():
                return
        except (redis.RedisError, OSError):
            pass
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


def _fields(reply: object) -> dict[str, str]:
    """A Sentinel's flat or parsed reply about one server, as text."""
    def text(value: object) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)
    if isinstance(reply, dict):
        return {text(key): text(value) for key, value in reply.items()}
    assert isinstance(reply, list)
    return {text(key): text(value) for key, value in zip(reply[::2], reply[1::2], strict=True)}


def _role(port: int) -> str:
    with _client(port) as client:
        return str(client.info("replication")["role"])


def _synchronised(port: int) -> bool:
    with _client(port) as client:
        info = client.info("replication")
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


class SentinelGroup:
    """A primary, a replica and three Sentinels; see the module docstring."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self.servers: list[RedisServer] = []
        self.sentinels: list[RedisSentinel] = []
        self.failovers: list[str] = []
        """One line per failover done: how, from which port to which."""

    def __enter__(self) -> Self:
        with ExitStack() as stack:
            first = stack.enter_context(RedisServer(appendfsync="always").start())
            second = stack.enter_context(RedisServer(appendfsync="always",
                                                     extra=["--replicaof", HOST, str(first.port)]).start())
            self.servers = [first, second]
            _until(lambda: _synchronised(second.port), "the replica's first synchronisation", 20)
            self.sentinels = [stack.enter_context(RedisSentinel(first.port, SERVICE, quorum=2,
                                                                down_after_ms=DOWN_AFTER_MS).start())
                              for _ in range(3)]
            _until(self._sentinels_agree, "the Sentinels' view of the group", 20)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def url(self, board: str, **options: object) -> str:
        """A board URL through the three Sentinels."""
        hosts = ",".join(sentinel.hosts for sentinel in self.sentinels)
        query = "&".join(f"{key}={value}" for key, value in {"sentinel": SERVICE, **options}.items())
        return f"redis://{hosts}/0/{board}?{query}"

    # -- what the group looks like -------------------------------------------

    def named_primary(self) -> int | None:
        """The port the first Sentinel that answers names as the primary."""
        for sentinel in self.sentinels:
            try:
                with _client(sentinel.port) as client:
                    address = client.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
            except (redis.RedisError, OSError):
                continue
            if address:
                return int(address[1])
        return None

    def primary(self) -> RedisServer:
        port = self.named_primary()
        return next(server for server in self.servers if server.port == port)

    def other(self, server: RedisServer) -> RedisServer:
        return next(candidate for candidate in self.servers if candidate is not server)

    def _sentinels_agree(self) -> bool:
        """Every Sentinel knows the other two and one replica, ready to be promoted."""
        for sentinel in self.sentinels:
            with _client(sentinel.port) as client:
                master = client.execute_command("SENTINEL", "master", SERVICE)
            fields = _fields(master)
            if int(fields["num-other-sentinels"]) < 2 or int(fields["num-slaves"]) < 1:
                return False
        return True

    def replica_ready(self) -> bool:
        """The primary's replica is synchronised and every Sentinel sees it up."""
        replica = self.other(self.primary())
        if not replica.running or not _synchronised(replica.port):
            return False
        for sentinel in self.sentinels:
            with _client(sentinel.port) as client:
                replicas = client.execute_command("SENTINEL", "replicas", SERVICE)
            for entry in replicas:
                fields = _fields(entry)
                if int(fields["port"]) == replica.port and "down" in fields["flags"]:
                    return False
        return True

    # -- failovers ---------------------------------------------------------------

    def kill_primary(self, *, restart_as_replica: bool) -> None:
        """SIGKILL the primary; wait until the replica serves as the new one; then, if asked, restart
        the old primary as its replica and wait until it is synchronised."""
        old = self.primary()
        new = self.other(old)
        old.kill()
        self._await_promotion(new, "kill", old)
        if restart_as_replica:
            old.extra = ["--replicaof", HOST, str(new.port)]
            old.start()
            _until(self.replica_ready, f"{old.hosts} back as a replica", 30)

    def graceful_failover(self) -> None:
        """``SENTINEL FAILOVER``: the replica is promoted, the old primary becomes its replica."""
        old = self.primary()
        new = self.other(old)
        _until(self.replica_ready, "a replica the Sentinels can promote", 30)

        def asked() -> bool:
            with _client(self.sentinels[0].port) as client:
                return bool(client.execute_command("SENTINEL", "FAILOVER", SERVICE))

        _until(asked, "SENTINEL FAILOVER accepted", 20)
        self._await_promotion(new, "graceful", old)
        _until(self.replica_ready, f"{old.hosts} demoted to a replica", 30)

    def _await_promotion(self, new: RedisServer, how: str, old: RedisServer) -> None:
        _until(lambda: self.named_primary() == new.port and _role(new.port) == "master",
               f"{new.hosts} promoted ({how})", 30)
        self.failovers.append(f"{how}: {old.port} -> {new.port}")
