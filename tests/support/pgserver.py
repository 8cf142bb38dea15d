"""Throwaway PostgreSQL 15 clusters on 127.0.0.1, each with its own data dir.

Uses Debian's PostgreSQL (``/usr/lib/postgresql/15/bin``; ``apt-get install -y postgresql`` when
missing). The server refuses to run as root, so as root ``initdb`` and ``postgres`` run as the
unprivileged ``postgres`` user (``runuser`` for initdb; the server process itself is started with
that user's uid so that signals reach it, not a wrapper), in a temp dir that user owns. CLI:
``python -m tests.support.pgserver run -- CMD ARGS...`` runs CMD with ``JOBBOARD_TEST_POSTGRESQL``
naming a fresh cluster (``postgresql://postgres@127.0.0.1:PORT/postgres``) and exits with its code.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from subprocess import DEVNULL, STDOUT

import pytest

from tests.support import zkserver
from tests.support.localserver import HOST, LocalServer, _running, die_with_us, run_with

ENV_VAR = "JOBBOARD_TEST_POSTGRESQL"
BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"
SETTINGS = {
    "listen_addresses": HOST, "max_connections": "300", "fsync": "off", "full_page_writes": "off",
    "shared_buffers": "64MB", "log_min_messages": "warning", "log_min_error_statement": "panic",
}
"""fsync off: the crash tests stop the server (``-m immediate``), not the machine, so the OS keeps what
was written; nothing here needs durability across a power cut."""


def ensure_postgresql_installed() -> None:
    """Install Debian's ``postgresql`` package (15 on bookworm) when its binaries are missing."""
    if (BIN / "postgres").exists() and (BIN / "initdb").exists():
        return
    if not zkserver._apt_updated:
        zkserver._apt("update")
        zkserver._apt_updated = True
    zkserver._apt("install", "-y", "postgresql")
    if not (BIN / "postgres").exists():
        raise RuntimeError(f"still no {BIN / 'postgres'} after installing postgresql")


def _as_root() -> bool:
    return os.geteuid() == 0


def accepts(port: int, timeout: float = 0.5) -> bool:
    """Whether 127.0.0.1:port answers a PostgreSQL SSL request (any one-byte answer: the server is up)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall((8).to_bytes(4, "big") + (80877103).to_bytes(4, "big"))
            return sock.recv(1) in (b"N", b"S")
    except OSError:
        return False


class PostgresServer(LocalServer):
    """One ``postgres`` process (a cluster made by initdb at first start), trust auth on loopback."""

    kind = "postgresql"
    output = "postgres.log"

    def __init__(self, *, port: int | None = None, start_timeout: float = 30.0,
                 settings: dict[str, str] | None = None) -> None:
        super().__init__(port or zkserver.free_port(), start_timeout)
        self.settings = {**SETTINGS, **(settings or {})}

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@{self.hosts}/{database}"

    @property
    def data(self) -> Path:
        assert self.dir is not None
        return self.dir / "data"

    def prepare(self, root: Path) -> None:
        """initdb once, as the postgres user when root (the temp dir is given to that user)."""
        if (root / "data" / "PG_VERSION").exists():
            return
        command = [str(BIN / "initdb"), "-D", str(root / "data"), "-U", USER, "--auth=trust", "-E", "UTF8",
                   "--no-sync", "--no-instructions"]
        if _as_root():
            entry = pwd.getpwnam(USER)
            os.chown(root, entry.pw_uid, entry.pw_gid)
            command = ["runuser", "-u", USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout[-1500:]}{done.stderr[-1500:]}")

    def command_line(self) -> list[str]:
        options = [f"-c{name}={value}" for name, value in self.settings.items()]
        return [str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir), *options]

    def spawn(self) -> None:
        """Like :meth:`LocalServer.spawn`, but the process runs as the postgres user when we are root."""
        if self.running:
            return
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="jobboard-postgresql-"))
        self.prepare(self.dir)
        user = {"user": USER, "group": USER, "extra_groups": []} if _as_root() else {}
        with open(self.dir / self.output, "ab") as out:
            if _as_root():
                os.chown(self.dir / self.output, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
            self._proc = subprocess.Popen(self.command_line(), stdin=DEVNULL, stdout=out, stderr=STDOUT,  # type: ignore[call-overload]
                                          start_new_session=True, preexec_fn=die_with_us(),  # noqa: PLW1509
                                          **user)
        _running.add(self)

    def serving(self) -> bool:
        return accepts(self.port)

    def stop_immediately(self) -> None:
        """``pg_ctl stop -m immediate``: SIGQUIT to the postmaster (no checkpoint; crash recovery at start)."""
        self._halt(signal.SIGQUIT, timeout=20.0)

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGINT), then delete the temp dir."""
        self._halt(signal.SIGINT, timeout)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` with ``JOBBOARD_TEST_POSTGRESQL`` naming a fresh cluster; return its exit code."""
    ensure_postgresql_installed()
    server = PostgresServer()
    return run_with(server, {ENV_VAR: server.url()}, cmd, f"pgserver: PostgreSQL serving on {server.hosts}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tests.support.pgserver``."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.pgserver")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help=f"run CMD with {ENV_VAR} set")
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("missing command: run -- CMD ARGS...")
    try:
        return run(cmd)
    except (RuntimeError, TimeoutError) as exc:
        print(f"pgserver: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


_shared: PostgresServer | None = None


def shared_url() -> str:
    """``JOBBOARD_TEST_POSTGRESQL``, else one cluster started for this process (stopped at exit)."""
    global _shared
    url = os.environ.get(ENV_VAR)
    if url:
        return url
    if _shared is None:
        ensure_postgresql_installed()
        _shared = PostgresServer().start()
    return _shared.url()


@pytest.fixture(scope="session")
def postgresql_url() -> str:
    """``postgresql://postgres@127.0.0.1:PORT/postgres`` of a real server (tests add ``?board=...``)."""
    return shared_url()
