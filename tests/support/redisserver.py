"""Throwaway Redis servers on 127.0.0.1, each with its own data dir.

Uses Debian's ``redis-server`` (and ``redis-sentinel``), installed with apt-get
when missing (the helpers of :mod:`tests.support.zkserver`). CLI:
``python -m tests.support.redisserver run -- CMD ARGS...`` runs CMD with
``JOBBOARD_REDIS_URL`` set to a fresh server and exits with its code.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from subprocess import DEVNULL, STDOUT
from typing import Any, Self

from tests.support import zkserver
from tests.support.zkserver import HOST, _die_with_us, _exit_code, _raise_terminated, _reap_child, _tail

ENV_VAR = "JOBBOARD_REDIS_URL"
PACKAGES = {"redis-server": "redis-server", "redis-sentinel": "redis-sentinel"}
_running: set[RedisServer] = set()


def ensure_redis_installed() -> None:
    """Install Debian's ``redis-server`` and ``redis-sentinel`` if either is missing."""
    missing = [package for command, package in PACKAGES.items() if not shutil.which(command)]
    if not missing:
        return
    if not zkserver._apt_updated:
        zkserver._apt("update")
        zkserver._apt_updated = True
    zkserver._apt("install", "-y", *missing)
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


class RedisServer:
    """One redis-server process with its own temp dir; AOF (``appendfsync everysec``) on by default."""

    def __init__(self, *, port: int | None = None, appendonly: bool = True, appendfsync: str = "everysec",
                 maxmemory_policy: str = "noeviction", extra: Sequence[str] = (),
                 start_timeout: float = 20.0) -> None:
        self.port = port or zkserver.free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.maxmemory_policy = maxmemory_policy
        self.extra = list(extra)
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"{HOST}:{self.port}"

    def url(self, path: str = "/0/jobboard") -> str:
        """A board URL for this server (database 0, board root ``jobboard`` unless given)."""
        return f"redis://{self.hosts}{path}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def command_line(self) -> list[str]:
        assert self.dir is not None
        return ["redis-server", "--bind", HOST, "--port", str(self.port), "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync, "--maxmemory-policy", self.maxmemory_policy,
                "--daemonize", "no", "--logfile", str(self.dir / "redis.log"), *self.extra]

    def spawn(self) -> None:
        if self.running:
            return
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="jobboard-redis-"))
        with open(self.dir / "stdout", "ab") as out:
            self._proc = subprocess.Popen(self.command_line(), stdin=DEVNULL, stdout=out, stderr=STDOUT,
                                          start_new_session=True, preexec_fn=_die_with_us())  # noqa: PLW1509
        _running.add(self)

    def start(self) -> Self:
        """Start (again after kill()) and wait until it answers PING."""
        self.spawn()
        deadline = time.monotonic() + self.start_timeout
        while not ping(self.port):
            if not self.running:
                self._halt(signal.SIGKILL)
                raise RuntimeError(f"redis-server {self.hosts} exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self._halt(signal.SIGKILL)
                raise TimeoutError(f"redis-server {self.hosts} not serving after {self.start_timeout}s")
            time.sleep(0.01)
        return self

    def log_tail(self, lines: int = 30) -> str:
        return "(no data dir)" if self.dir is None else _tail(self.dir / "redis.log", lines)

    def _halt(self, sig: signal.Signals, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def kill(self) -> None:
        """SIGKILL and wait; data dir and port are kept for start()."""
        self._halt(signal.SIGKILL)

    def restart(self) -> Self:
        """Graceful stop (the AOF is flushed), then start on the same data dir and port."""
        self._halt(signal.SIGTERM)
        return self.start()

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (e.g. SIGSTOP/SIGCONT) to the running server."""
        if self._proc is not None:
            self._proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (SIGKILL after ``timeout`` s) and delete the data dir."""
        self._halt(signal.SIGTERM, timeout)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


SENTINEL_CONF = """\
bind 127.0.0.1
port {port}
dir {dir}
logfile {dir}/sentinel.log
sentinel monitor {service} 127.0.0.1 {primary} 1
sentinel down-after-milliseconds {service} 500
sentinel failover-timeout {service} 3000
sentinel parallel-syncs {service} 1
"""


class RedisSentinel(RedisServer):
    """One redis-sentinel process watching ``primary_port`` as ``service`` (quorum 1)."""

    def __init__(self, primary_port: int, service: str = "jobboard", **options: Any) -> None:
        super().__init__(**options)
        self.primary_port = primary_port
        self.service = service

    def command_line(self) -> list[str]:
        assert self.dir is not None
        conf = self.dir / "sentinel.conf"
        if not conf.exists():  # Sentinel rewrites its own config: write it once
            conf.write_text(SENTINEL_CONF.format(port=self.port, dir=self.dir, service=self.service,
                                                 primary=self.primary_port))
        return ["redis-sentinel", str(conf)]

    def log_tail(self, lines: int = 30) -> str:
        return "(no data dir)" if self.dir is None else _tail(self.dir / "sentinel.log", lines)


@atexit.register
def _reap_all() -> None:
    for server in list(_running):
        server.kill()
        server.stop()


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` with ``JOBBOARD_REDIS_URL`` naming a fresh server; return its exit code."""
    ensure_redis_installed()
    signal.signal(signal.SIGTERM, _raise_terminated)
    with RedisServer() as server:
        print(f"redisserver: Redis serving on {server.hosts}", file=sys.stderr, flush=True)
        try:
            child = subprocess.Popen(list(cmd), env={**os.environ, ENV_VAR: server.url("")})
        except OSError as exc:
            print(f"redisserver: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
            return 127
        try:
            return _exit_code(child.wait())
        except KeyboardInterrupt as exc:
            if isinstance(exc, zkserver._Terminated):
                child.terminate()
            return _reap_child(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tests.support.redisserver``."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.redisserver")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run CMD with JOBBOARD_REDIS_URL set")
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("missing command: run -- CMD ARGS...")
    try:
        return run(cmd)
    except (RuntimeError, TimeoutError) as exc:
        print(f"redisserver: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
