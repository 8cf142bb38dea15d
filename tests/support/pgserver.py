"""Throwaway PostgreSQL 15 clusters on 127.0.0.1, each with its own data dir.

Uses Debian's PostgreSQL (``/usr/lib/postgresql/15/bin``; ``apt-get install -y postgresql`` when
missing). The server refuses to run as root, so as root ``initdb`` and ``postgres`` run as the
unprivileged ``postgres`` user (``runuser`` for initdb; the server process itself is started with
that user's uid so that signals reach it, not a wrapper), in a temp dir that user owns. CLI:
``python -m tests.support.pgserver run -- CMD ARGS...`` runs CMD with ``JOBBOARD_TEST_POSTGRESQL``
naming a fresh cluster (``postgresql://postgres@127.0.0.1:PORT/postgres``) and exits with its code.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.localserver import HOST, LocalServer, apt_install, free_port, main, run_with

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
    apt_install("postgresql")
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
    stop_signal = signal.SIGINT
    """Fast shutdown."""

    def __init__(self, *, port: int | None = None, start_timeout: float = 30.0,
                 settings: dict[str, str] | None = None) -> None:
        super().__init__(port or free_port(), start_timeout)
        self.settings = {**SETTINGS, **(settings or {})}

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@{self.hosts}/{database}"

    @property
    def data(self) -> Path:
        assert self.dir is not None
        return self.dir / "data"

    def prepare(self, root: Path) -> None:
        """initdb once, as the postgres user when root (the temp dir and the log are given to that user)."""
        if _as_root():
            (root / self.output).touch()
            os.chown(root / self.output, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
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

    def popen_options(self) -> dict[str, Any]:
        """The process runs as the postgres user when we are root."""
        return {"user": USER, "group": USER, "extra_groups": []} if _as_root() else {}

    def serving(self) -> bool:
        return accepts(self.port)

    def stop_immediately(self) -> None:
        """``pg_ctl stop -m immediate``: SIGQUIT to the postmaster (no checkpoint; crash recovery at start)."""
        self._halt(signal.SIGQUIT, timeout=20.0)


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` with ``JOBBOARD_TEST_POSTGRESQL`` naming a fresh cluster; return its exit code."""
    ensure_postgresql_installed()
    server = PostgresServer()
    return run_with(server, {ENV_VAR: server.url()}, cmd, f"pgserver: PostgreSQL serving on {server.hosts}")


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


if __name__ == "__main__":
    sys.exit(main("pgserver", ENV_VAR, lambda cmd, args: run(cmd)))
