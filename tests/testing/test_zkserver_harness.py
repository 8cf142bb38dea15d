"""The loopback ZooKeeper harness (tests/support/zkserver.py) against real servers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiozk
import pytest

from tests.support.tcpproxy import TcpProxy
from tests.support.zkserver import (
    ZooKeeperEnsemble,
    ZooKeeperServer,
    ensure_zookeeper_installed,
    four_letter,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _zookeeper_installed() -> None:
    ensure_zookeeper_installed()


async def _zk_call(hosts: str, path: str, data: bytes | None = None) -> bytes:
    """Create ``path`` with ``data`` (if given), then read it back."""
    client = aiozk.ZKClient(hosts, session_timeout=5)
    await asyncio.wait_for(client.start(), 20)
    try:
        if data is not None:
            await client.create(path, data=data)
        return bytes(await client.get_data(path))
    finally:
        await asyncio.wait_for(client.close(), 10)


@pytest.mark.timeout(60)
def test_standalone_answers_ruok_and_cleans_up() -> None:
    with ZooKeeperServer() as zk:
        assert four_letter(zk.port, "ruok") == "imok"
        assert zk.mode() == "standalone"
        assert zk.url("/jobs") == f"zookeeper://127.0.0.1:{zk.port}/jobs"
        data_dir = zk.dir
        assert data_dir is not None and (data_dir / "zookeeper.log").exists()
    assert not zk.running
    assert not data_dir.exists()


@pytest.mark.timeout(90)
def test_znode_survives_restart_and_kill() -> None:
    big = b"x" * (2 * 1024 * 1024)  # over ZooKeeper's default 1 MiB jute.maxbuffer
    with ZooKeeperServer(jute_maxbuffer=4 * 1024 * 1024) as zk:
        port = zk.port
        assert asyncio.run(_zk_call(zk.hosts, "/harness", big)) == big
        zk.restart()
        assert zk.port == port
        assert asyncio.run(_zk_call(zk.hosts, "/harness")) == big
        zk.kill()
        assert not zk.running
        zk.start()
        assert asyncio.run(_zk_call(zk.hosts, "/harness")) == big


@pytest.mark.timeout(120)
def test_ensemble_elects_new_leader_after_kill() -> None:
    started = time.monotonic()
    with ZooKeeperEnsemble(3) as ensemble:
        print(f"ensemble start: {time.monotonic() - started:.2f}s")
        assert len(ensemble.hosts.split(",")) == 3
        old = ensemble.leader_index()
        assert sorted(m.mode() for m in ensemble.members) == ["follower", "follower", "leader"]
        killed = time.monotonic()
        ensemble.kill(old)
        new = ensemble.leader_index(timeout=20)
        print(f"re-election: {time.monotonic() - killed:.2f}s")
        assert new != old
        assert asyncio.run(_zk_call(ensemble.hosts, "/after-election", b"ok")) == b"ok"
        ensemble.start_member(old)
        assert ensemble.members[old].mode() == "follower"


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _proxy_scenario() -> None:
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    async with echo, TcpProxy("127.0.0.1", echo.sockets[0].getsockname()[1]) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"

        proxy.pause()  # black hole: nothing comes back, the connection stays up
        writer.write(b"held")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.3)
        proxy.resume()
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"

        proxy.drop()
        try:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except ConnectionResetError:
            pass
        writer.close()


@pytest.mark.timeout(30)
def test_tcp_proxy_forwards_pauses_and_drops() -> None:
    asyncio.run(_proxy_scenario())


@pytest.mark.timeout(60)
def test_cli_runs_command_with_hosts_and_exit_code() -> None:
    child = (
        "import os, socket, sys; host, port = os.environ['JOBBOARD_ZK_HOSTS'].split(':');"
        "s = socket.create_connection((host, int(port)), timeout=5); s.sendall(b'ruok');"
        "sys.exit(3 if s.recv(4) == b'imok' else 1)"
    )
    cmd = [sys.executable, "-m", "tests.support.zkserver", "run", "--", sys.executable, "-c", child]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=50, check=False)
    assert done.returncode == 3, done.stderr
