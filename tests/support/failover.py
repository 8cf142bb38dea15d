"""Two Redis servers and three Sentinels on 127.0.0.1, and the failovers an operator sees.

:class:`SentinelGroup` starts a primary, one replica (``appendfsync always``, so ``durability=strict``
boards accept them) and three Sentinels (quorum 2), then performs failovers in the ways they happen:
the primary SIGKILLed (and, if asked, restarted as a replica of the new one), or a graceful
``SENTINEL FAILOVER``. Every step waits until the Sentinels name the new primary and it serves as one.
The calls block: run them in a thread from async tests. A step that does not happen in time fails
with the tails of the servers' and Sentinels' logs.

How long a graceful failover takes, and why (measured: 15.7-16.4 s in 12 runs, load 4.5-9): the
promotion is seen by the Sentinels about 1 s after ``SENTINEL FAILOVER``; the old primary goes on
answering as a primary until a Sentinel turns it into a replica, which Sentinel does only after it
reported itself a primary for 8 s, at the next ``INFO`` it sends a replica (every 10 s: fixed in
Sentinel, not configurable), so about 10 s after the promotion; then it resynchronises in full (it took
writes after the promotion), which Redis delays by ``repl-diskless-sync-delay`` (5 s by default, 0 here).
A conversion missed at one ``INFO`` waits for the next (10 s more), and a Sentinel starved of CPU for
2 s enters TILT mode and does nothing for 30 s: hence the bounds below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Self

import redis

from tests.support.localserver import HOST
from tests.support.redisserver import RedisSentinel, RedisServer

SERVICE = "failover"
DOWN_AFTER_MS = 500
SERVER_OPTIONS = ["--repl-diskless-sync-delay", "0"]
"""A full resynchronisation starts at once (Redis waits 5 s by default, for other replicas to share it)."""
PROMOTED_WITHIN = 30.0
DEMOTED_WITHIN = 60.0
"""The old primary of a graceful failover serving as a synchronised replica (typically 11 s: see above)."""


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=HOST, port=port, socket_timeout=2.0, socket_connect_timeout=2.0)


def until(done: Callable[[], object], what: str, timeout: float, logs: Callable[[], str] = lambda: "") -> None:
    """Poll ``done()`` until true (a Redis or socket error counts as false); the Cluster harness's too.

    :raises TimeoutError: not within ``timeout`` seconds (with ``logs()``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if done():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout} s\n{logs()}")
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


def synchronised(port: int) -> bool:
    with _client(port) as client:
        info = client.info("replication")
    return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")


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
            first = stack.enter_context(RedisServer(appendfsync="always", extra=SERVER_OPTIONS).start())
            second = stack.enter_context(RedisServer(appendfsync="always", extra=[
                *SERVER_OPTIONS, "--replicaof", HOST, str(first.port)]).start())
            self.servers = [first, second]
            until(lambda: synchronised(second.port), "the replica's first synchronisation", 20)
            self.sentinels = [stack.enter_context(RedisSentinel(first.port, SERVICE, quorum=2,
                                                                down_after_ms=DOWN_AFTER_MS).start())
                              for _ in range(3)]
            until(self._sentinels_agree, "the Sentinels' view of the group", 20)
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

    def failovers_made(self) -> list[str]:
        """The failovers the Sentinels made (the ``+switch-master`` lines of the Sentinel that logged most): the
        ones this group performed, plus any the Sentinels started on their own (a primary that looked down
        for ``DOWN_AFTER_MS``, e.g. stalled on a loaded host). Read before the group is closed."""
        return max(([line.partition("# ")[2] for line in (sentinel.dir / "sentinel.log").read_text(
                        errors="replace").splitlines() if "+switch-master" in line]
                    for sentinel in self.sentinels if sentinel.dir is not None), key=len)

    def replica_ready(self) -> bool:
        """The primary's replica is synchronised and every Sentinel sees it up."""
        replica = self.other(self.primary())
        if not replica.running or not synchronised(replica.port):
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
        the old primary as its replica and wait until it is synchronised (:meth:`restart_as_replica`)."""
        old = self.primary()
        new = self.other(old)
        old.kill()
        self._await_promotion(new, "kill", old)
        if restart_as_replica:
            self.restart_as_replica(old)

    def restart_as_replica(self, old: RedisServer) -> None:
        """Start the stopped ``old`` as the primary's replica; wait until it is synchronised."""
        old.extra = [*SERVER_OPTIONS, "--replicaof", HOST, str(self.other(old).port)]
        old.start()
        self._until(self.replica_ready, f"{old.hosts} back as a replica", 30)

    def graceful_failover(self, *, demoted: bool = True) -> None:
        """``SENTINEL FAILOVER``: the replica is promoted (the Sentinels name it, it serves as the primary);
        with ``demoted``, wait too until the old primary is its synchronised replica (see the module
        docstring: about 11 s more), which the next failover needs. Without, the old primary still
        answers as a primary when this returns (for about 10 s)."""
        old = self.primary()
        new = self.other(old)
        self._until(self.replica_ready, "a replica the Sentinels can promote", 30)

        def asked() -> bool:
            with _client(self.sentinels[0].port) as client:
                return bool(client.execute_command("SENTINEL", "FAILOVER", SERVICE))

        self._until(asked, "SENTINEL FAILOVER accepted", 20)
        self._await_promotion(new, "graceful", old)
        if demoted:
            self._until(self.replica_ready, f"{old.hosts} demoted to a replica", DEMOTED_WITHIN)

    def _await_promotion(self, new: RedisServer, how: str, old: RedisServer) -> None:
        self._until(lambda: self.named_primary() == new.port and _role(new.port) == "master",
                    f"{new.hosts} promoted ({how})", PROMOTED_WITHIN)
        self.failovers.append(f"{how}: {old.port} -> {new.port}")

    def _until(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        until(done, what, timeout, self.log_tails)

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` of every server's and Sentinel's log (why a step did not happen in time)."""
        return "\n".join(f"--- {server.kind} {server.hosts}:\n{server.log_tail(lines)}"
                         for server in [*self.servers, *self.sentinels])
