"""Throwaway ZooKeeper servers and a fault-injection TCP proxy, all on 127.0.0.1.

Uses Debian's ``zookeeper`` package (jars in /usr/share/java); stdlib only.
CLI: ``python -m tests.support.zkserver run -- CMD ARGS...`` runs CMD with
``JOBBOARD_ZK_HOSTS`` set to a fresh standalone server and exits with its code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Self, TypedDict, Unpack

from tests.support.localserver import (
    HOST,
    LocalServer,
    apt_install,
    free_port,
    free_ports,
    main,
    named_or_started,
    run_with,
    tail,
)

LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
ENV_VAR = "JOBBOARD_ZK_HOSTS"
JAVA_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path already lists its dependencies (jute,
# netty, jetty, slf4j-api, ...); we only add an SLF4J binding (log4j 1.2).
JARS = ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Small heap; C1-only JIT and serial GC start fastest (measured ~0.25 s to serving).
JVM_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData")
ZOO_CFG = """\
tickTime={zk.tick_time}
initLimit=10
syncLimit=5
dataDir={data}
clientPortAddress=127.0.0.1
clientPort={zk.port}
minSessionTimeout={zk.min_session_timeout}
maxSessionTimeout=60000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
preAllocSize=4096
forceSync={sync}
"""
LOG4J = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t:%C{{1}}@%L] - %m%n
"""


class ServerOptions(TypedDict, total=False):
    """Keyword options shared by ZooKeeperServer and ZooKeeperEnsemble."""

    jute_maxbuffer: int | None
    tick_time: int
    fsync: bool


def _missing_parts() -> list[str]:
    missing = [jar for jar in JARS if not (JAVA_DIR / jar).is_file()]
    return missing if shutil.which("java") else [*missing, "java"]


def ensure_zookeeper_installed() -> None:
    """Install Debian's ``zookeeper`` package if its jars (or java) are missing."""
    if not _missing_parts():
        return
    apt_install("zookeeper")
    if missing := _missing_parts():
        raise RuntimeError(f"still missing after installing zookeeper: {', '.join(missing)}")


def classpath() -> str:
    """The server classpath: zookeeper.jar (deps via its manifest) plus log4j."""
    return os.pathsep.join(str(JAVA_DIR / jar) for jar in JARS)


def four_letter(port: int, command: str = "srvr", timeout: float = 1.0) -> str:
    """Send a four-letter-word command to 127.0.0.1:port; return the reply."""
    chunks = []
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(command.encode())
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def probe_mode(port: int) -> str | None:
    """``Mode:`` from ``srvr`` (standalone/leader/follower), None if not serving."""
    try:
        reply = four_letter(port, "srvr", timeout=0.5)
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


class ZooKeeperServer(LocalServer):
    """One ZooKeeper JVM with its own temp dir; standalone unless given quorum config."""

    kind = "ZooKeeper"
    output = "jvm.out"

    def __init__(
        self,
        *,
        port: int | None = None,
        jute_maxbuffer: int | None = None,
        tick_time: int = 500,
        fsync: bool = False,
        start_timeout: float = 30.0,
        extra_config: Mapping[str, object] | None = None,
        myid: int | None = None,
    ) -> None:
        super().__init__(port or free_port(), start_timeout)
        self.jute_maxbuffer = jute_maxbuffer
        self.tick_time = tick_time
        self.min_session_timeout = 2 * tick_time  # ms; the server's lower bound for clients
        self.fsync = fsync  # off by default: the data is throwaway, kill -9 still keeps it
        self.extra_config = dict(extra_config or {})
        self.myid = myid

    def url(self, path: str = "") -> str:
        """A board URL for this server."""
        return f"zookeeper://{self.hosts}{path}"

    def prepare(self, root: Path) -> None:
        (root / "data").mkdir(exist_ok=True)
        if self.myid is not None:
            (root / "data" / "myid").write_text(f"{self.myid}\n")
        cfg = ZOO_CFG.format(zk=self, data=root / "data", sync="yes" if self.fsync else "no")
        cfg += "".join(f"{key}={value}\n" for key, value in self.extra_config.items())
        (root / "zoo.cfg").write_text(cfg)
        (root / "log4j.properties").write_text(LOG4J.format(log=root / "zookeeper.log"))

    def command_line(self) -> list[str]:
        """The java command that runs this server."""
        assert self.dir is not None
        props = [f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}"]
        if self.jute_maxbuffer is not None:
            props.append(f"-Djute.maxbuffer={self.jute_maxbuffer}")
        return ["java", *JVM_FLAGS, *props, "-cp", classpath(), MAIN_CLASS, str(self.dir / "zoo.cfg")]

    def serving(self) -> bool:
        return probe_mode(self.port) is not None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server log and of the JVM's own output."""
        if self.dir is None:
            return "(no data dir)"
        log, out = tail(self.dir / "zookeeper.log", lines), tail(self.dir / "jvm.out", 10)
        return f"{log}\n--- jvm.out ---\n{out}"

    def mode(self) -> str:
        """``standalone``, ``leader`` or ``follower`` (via ``srvr``)."""
        mode = probe_mode(self.port)
        if mode is None:
            raise RuntimeError(f"ZooKeeper {self.hosts} is not serving")
        return mode


class ZooKeeperEnsemble:
    """``n`` quorum members on loopback, each with its own ports and data dir."""

    def __init__(self, n: int = 3, *, start_timeout: float = 60.0, **options: Unpack[ServerOptions]) -> None:
        ports = free_ports(3 * n)
        quorum = {f"server.{i + 1}": f"{HOST}:{ports[3 * i + 1]}:{ports[3 * i + 2]}" for i in range(n)}
        self.start_timeout = start_timeout
        self.members = [
            ZooKeeperServer(
                port=ports[3 * i], myid=i + 1, extra_config=quorum, start_timeout=start_timeout, **options
            )
            for i in range(n)
        ]

    @property
    def hosts(self) -> str:
        """``127.0.0.1:a,127.0.0.1:b,...``."""
        return ",".join(member.hosts for member in self.members)

    def url(self, path: str = "") -> str:
        """A board URL listing every member."""
        return f"zookeeper://{self.hosts}{path}"

    def start(self) -> Self:
        """Launch all members, wait until all serve and one leads."""
        deadline = time.monotonic() + self.start_timeout
        try:
            for member in self.members:
                member.spawn()
            for member in self.members:
                member.wait_serving(max(0.0, deadline - time.monotonic()))
            self.leader_index(max(0.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def leader_index(self, timeout: float = 10.0) -> int:
        """Index of the member reporting ``Mode: leader``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            for index, member in enumerate(self.members):
                if member.running and probe_mode(member.port) == "leader":
                    return index
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader among {self.hosts} after {timeout}s")
            time.sleep(0.02)

    def kill(self, index: int) -> None:
        """SIGKILL one member (its data is kept)."""
        self.members[index].kill()

    def start_member(self, index: int) -> None:
        """(Re)start one member and wait until it serves."""
        self.members[index].start()

    def stop(self) -> None:
        """Stop every member and delete their data."""
        for member in self.members:
            member.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fresh_server(jute_maxbuffer: int | None = None) -> ZooKeeperServer:
    """A standalone server, not started yet (the package installed if need be)."""
    ensure_zookeeper_installed()
    return ZooKeeperServer(jute_maxbuffer=jute_maxbuffer)


def hosts_from_env_or_started() -> AbstractContextManager[str]:
    """``JOBBOARD_ZK_HOSTS``, else the hosts of a fresh server started here (stopped on exit)."""
    return named_or_started(ENV_VAR, fresh_server, lambda server: server.hosts)


def run(cmd: Sequence[str], jute_maxbuffer: int | None = None) -> int:
    """Run ``cmd`` against a fresh standalone server; return its exit code."""
    server = fresh_server(jute_maxbuffer)
    return run_with(server, {ENV_VAR: server.hosts}, cmd, f"zkserver: ZooKeeper serving on {server.hosts}")


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jute-maxbuffer", type=int, default=None)


if __name__ == "__main__":
    sys.exit(main("zkserver", ENV_VAR, lambda cmd, args: run(cmd, args.jute_maxbuffer), options=_options))
