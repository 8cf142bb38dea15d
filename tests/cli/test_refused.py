"""A board whose every server refuses the connection answers at once, in one line (issue 24: `jobboard list`
took 10.5 s and printed two lines); a server that is reachable but slow is still waited for.

Real servers and really refused ports on 127.0.0.1 (a port bound, then released, that nothing listens on).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard_redis.client_wire import refused
from jobboard_zookeeper.zk_protocol import REFUSED, connect_failure
from tests.cli.test_edges import started
from tests.support.localserver import free_port, refused_port
from tests.support.redisserver import RedisSentinel, RedisServer
from tests.support.tcpproxy import TcpProxy

REFUSED_WITHIN = 1.5
"""Seconds the command may take once started (0.5 s of refusals, then one line; it was 10 s)."""

TIMED = """
import contextlib, importlib, io, pkgutil, sys, time
from jobboard.board.registry import open_board
from jobboard.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["list", "--board", "memory://warm"])  # the command's modules imported, then the backend's:
package = importlib.import_module(type(open_board(sys.argv[-1]).backend).__module__.split(".")[0])
for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
    importlib.import_module(module.name)
began = time.monotonic()
try:
    status = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        out.write(str(time.monotonic() - began))
raise SystemExit(status)
"""
"""``jobboard list --board URL``, timed in its process from its imports done to its exit."""


def jobboard_list(board: str, timing: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``jobboard list --board board``; returns its result and its time once started: not the interpreter's
    start nor the imports, which a loaded machine stretches by seconds (the command's start-up on memory://,
    taken as a baseline in another run, was 1.2 s once and 3.9 s the next at load 30; the open it was meant
    to isolate took 0.5-1.1 s in-process)."""
    result = subprocess.run([sys.executable, "-c", TIMED, str(timing), "list", "--board", board],
                            capture_output=True, text=True, timeout=60, check=False)
    return result, float(timing.read_text())


@pytest.mark.parametrize("scheme", ["redis", "zookeeper", "redis-sentinel"])
def test_a_board_whose_every_server_refuses_answers_at_once_in_one_line(scheme: str, tmp_path: Path) -> None:
    with refused_port() as first, refused_port() as second:
        refuse_at_once(scheme, [first, second], tmp_path / "took")


def refuse_at_once(scheme: str, ports: list[int], timing: Path) -> None:
    hosts = [f"127.0.0.1:{port}" for port in ports]
    url = {"redis": f"redis://{hosts[0]}/0/refused", "zookeeper": f"zookeeper://{','.join(hosts)}/refused",
           "redis-sentinel": f"redis://{','.join(hosts)}/0/refused?sentinel=jobboard"}[scheme]
    named = hosts[:1] if scheme == "redis" else hosts
    result, took = jobboard_list(url, timing)
    assert result.returncode == 3, result.stderr
    assert took < REFUSED_WITHIN, f"{took:.2f} s: {result.stderr}"
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("jobboard: error: "), result.stderr
    assert all(host in result.stderr for host in named) and "refused" in result.stderr, result.stderr


def real_refusal(host: str) -> OSError:
    try:
        with refused_port() as port:
            socket.create_connection((host, port), timeout=5.0).close()
    except OSError as error:
        return error
    raise AssertionError(f"something listens on {host}")


def test_a_host_whose_every_address_refuses_counts_as_refusing() -> None:
    """A name with several addresses (``localhost``: ::1 and 127.0.0.1) fails with one ``OSError`` that
    joins each address's error in its text (asyncio's ``create_connection`` on Python 3.11)."""
    both = [real_refusal("127.0.0.1"), real_refusal("127.0.0.2")]
    assert all(isinstance(error, ConnectionRefusedError) for error in both)
    joined = OSError("Multiple exceptions: {}".format(", ".join(str(error) for error in both)))
    other = OSError(99, "Cannot assign requested address")
    mixed = OSError("Multiple exceptions: {}".format(", ".join(str(error) for error in [both[0], other])))
    assert [refused(error) for error in (both[0], joined, mixed, other)] == [True, True, False, False]
    assert [connect_failure(error) == REFUSED for error in (both[0], joined, mixed, other)] == [
        True, True, False, False]


def accepting(port: int, within: float = 20.0) -> None:
    """Wait until 127.0.0.1:port accepts TCP connections."""
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing accepts on {port}"
            time.sleep(0.01)


def first_reply(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as connection:
        connection.sendall(b"PING\r\n")
        return connection.recv(64)


async def test_a_redis_that_answers_loading_is_waited_for() -> None:
    """LOADING is not a refusal: the open keeps retrying until the data set is loaded (3 s here)."""
    with RedisServer(appendonly=False, extra=["--key-load-delay", "50000",  # µs per key while loading
                                              "--loading-process-events-interval-bytes", "1024"]) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10.0) as writer:
            for index in range(60):
                writer.sendall(f"SET key{index} {'x' * 4000}\r\n".encode())
                assert writer.recv(16) == b"+OK\r\n"
            writer.sendall(b"SAVE\r\n")
            assert writer.recv(16) == b"+OK\r\n"
        server.kill()
        server.spawn()  # loads the 60 keys, 50 ms each
        accepting(server.port)
        assert first_reply(server.port).startswith(b"-LOADING"), "the test needs a server still loading"
        started = time.monotonic()
        with anyio.fail_after(30):
            async with open_board(server.url("/0/loading")) as board:
                assert await board.job_count() == 0
        assert time.monotonic() - started > 1.0  # it waited the loading out (a refusal would end at 0.5 s)


def test_redis_with_a_connect_timeout_waits_for_a_server_that_starts() -> None:
    """An explicit ?connect_timeout= waits for a server that refuses until it listens (as zookeeper:// does,
    tests/cli/test_ops.py)."""
    port = free_port()
    with started("list", "--board", f"redis://127.0.0.1:{port}/0/starting?connect_timeout=30") as child:
        time.sleep(2.0)  # four times the refusals that end an open without connect_timeout
        assert child.poll() is None, child.communicate()
        with RedisServer(port=port):
            _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert err == "", err


async def opened_only_once(url: str, ready: Callable[[], Awaitable[None]]) -> None:
    """Open a board at ``url`` (default connect_timeout: refusals would end it within 0.5 s); it must still
    be opening 2 s later, when ``ready()`` makes its server answer, and then open."""
    opened = anyio.Event()

    async def open_and_use() -> None:
        async with open_board(url) as board:
            opened.set()
            assert await board.job_count() == 0

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(open_and_use)
            await anyio.sleep(2.0)  # four times the refusals that end an open
            assert not opened.is_set()
            await ready()
    assert opened.is_set()


async def test_a_zookeeper_that_accepts_but_does_not_answer_is_waited_for(zk_hosts: str) -> None:
    """A server that accepts and stays silent (each attempt times out after 3 x ping_timeout = 0.45 s) is
    not a refusal."""
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    async with TcpProxy(host, int(port)) as proxy:
        proxy.pause()

        async def answer() -> None:
            proxy.resume()

        await opened_only_once(f"zookeeper://{proxy.hosts}/refused-silent?ping_timeout=0.15&session_timeout=20",
                               answer)


async def test_sentinels_that_answer_while_their_primary_refuses_are_waited_for() -> None:
    """The Sentinels answer and name a primary that refuses (it is down): they will name another, or it
    comes back; only Sentinels that all refuse end an open early."""
    primary = RedisServer(port=free_port())
    try:
        with RedisSentinel(primary.port, "refused") as sentinel:

            async def start_primary() -> None:
                await anyio.to_thread.run_sync(primary.start)

            await opened_only_once(f"redis://{sentinel.hosts}/0/refused-primary?sentinel=refused", start_primary)
    finally:
        primary.stop()
