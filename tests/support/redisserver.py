"""Throwaway Redis servers on 127.0.0.1, each with its own data dir.

Uses Debian's ``redis-server`` (and ``redis-sentinel``), installed with apt-get
when missing. CLI:
``python -m tests.support.redisserver run -- CMD ARGS...`` runs CMD with
``JOBBOARD_REDIS_URL`` set to a fresh server and exits with its code.
"""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from tests.support.localserver import (
    HOST,
    LocalServer,
    apt_install,
    free_port,
    main,
    named_or_started,
    run_with,
    tail,
)

ENV_VAR = "JOBBOARD_REDIS_URL"
PACKAGES = {"redis-server": "redis-server", "redis-sentinel": "redis-sentinel"}


def ensure_redis_installed() -> None:
    """Install Debian's ``redis-server`` and ``redis-sentinel`` if either is missing."""
    missing = [package for command, package in PACKAGES.items() if not shutil.which(command)]
    if not missing:
        return
    apt_install(*missing)
    if still := [command for command in PACKAGES if not shutil.which(command)]:
        raise RuntimeError(f"still missing after installing redis: {', '.join(still)}")


def ping(port: int, timeout: float = 0.5, password: str | None = None) -> bool:
    """Whether 127.0.0.1:port answers PING (after AUTH when given a password)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            if password is not None:
                sock.sendall(f"AUTH {password}\r\n".encode())
                sock.recv(64)
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer(LocalServer):
    """One redis-server process with its own temp dir; AOF (``appendfsync everysec``) on by default."""

    kind = "redis-server"

    def __init__(self, *, port: int | None = None, appendonly: bool = True, appendfsync: str = "everysec",
                 maxmemory_policy: str = "noeviction", extra: Sequence[str] = (),
                 start_timeout: float = 20.0, run_under: Sequence[str] = ()) -> None:
        """``run_under``: a command the server runs under (``valgrind --tool=callgrind ...`` for a benchmark
        that counts its instructions; none by default)."""
        super().__init__(port or free_port(), start_timeout)
        self.run_under = list(run_under)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.maxmemory_policy = maxmemory_policy
        self.extra = list(extra)

    def url(self, path: str = "/0/jobboard") -> str:
        """A board URL for this server (database 0, board root ``jobboard`` unless given)."""
        return f"redis://{self.hosts}{path}"

    def command_line(self) -> list[str]:
        assert self.dir is not None
        return [*self.run_under, "redis-server", "--bind", HOST, "--port", str(self.port), "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync, "--maxmemory-policy", self.maxmemory_policy,
                "--daemonize", "no", "--logfile", str(self.dir / "redis.log"), *self.extra]

    def serving(self) -> bool:
        return ping(self.port)

    def log_tail(self, lines: int = 30) -> str:
        return "(no data dir)" if self.dir is None else tail(self.dir / "redis.log", lines)


SENTINEL_CONF = """\
bind 127.0.0.1
port {port}
dir {dir}
logfile {dir}/sentinel.log
sentinel monitor {service} 127.0.0.1 {primary} {quorum}
sentinel down-after-milliseconds {service} {down_after_ms}
sentinel failover-timeout {service} 3000
sentinel parallel-syncs {service} 1
"""


class RedisSentinel(RedisServer):
    """One redis-sentinel process watching ``primary_port`` as ``service`` (quorum 1 unless told)."""

    def __init__(self, primary_port: int, service: str = "jobboard", *, quorum: int = 1,
                 down_after_ms: int = 500, **options: Any) -> None:
        super().__init__(**options)
        self.primary_port = primary_port
        self.service = service
        self.quorum = quorum
        self.down_after_ms = down_after_ms

    def command_line(self) -> list[str]:
        assert self.dir is not None
        conf = self.dir / "sentinel.conf"
        if not conf.exists():  # Sentinel rewrites its own config: write it once
            conf.write_text(SENTINEL_CONF.format(port=self.port, dir=self.dir, service=self.service,
                                                 primary=self.primary_port, quorum=self.quorum,
                                                 down_after_ms=self.down_after_ms))
        return ["redis-sentinel", str(conf)]

    def log_tail(self, lines: int = 30) -> str:
        return "(no data dir)" if self.dir is None else tail(self.dir / "sentinel.log", lines)


def fresh_server() -> RedisServer:
    """A server with the default options, not started yet (the packages installed if need be)."""
    ensure_redis_installed()
    return RedisServer()


def url_from_env_or_started() -> AbstractContextManager[str]:
    """``JOBBOARD_REDIS_URL``, else ``redis://127.0.0.1:PORT`` of a fresh server started here (stopped on exit)."""
    return named_or_started(ENV_VAR, fresh_server, lambda server: server.url(""))


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` with ``JOBBOARD_REDIS_URL`` naming a fresh server; return its exit code."""
    server = fresh_server()
    return run_with(server, {ENV_VAR: server.url("")}, cmd, f"redisserver: Redis serving on {server.hosts}")


if __name__ == "__main__":
    sys.exit(main("redisserver", ENV_VAR, lambda cmd, args: run(cmd)))
