"""A CLI process pointed at a refused ZooKeeper port hung after its error for good (seen once in CI, under
load): at exit asyncio cancelled aiozk's reconnect task once, the cancellation landed as the connection attempt
inside ``asyncio.wait_for`` finished, and Python 3.11's ``wait_for`` then returns the result and drops the
cancellation (fixed in 3.12), so the reconnect loop went on and ``asyncio.run`` waited for it forever. The
loop must end once the board closed, whether or not a cancellation reached it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.localserver import refused_port

pytestmark = pytest.mark.timeout(60)

SWALLOWING = """
import asyncio, sys
from jobboard import open_board
from jobboard.errors import BackendUnavailable
import jobboard_zookeeper.zk_protocol as zk_protocol

hook = zk_protocol.hook_connections
def swallowing(session, ping_timeout, closing):
    failures = hook(session, ping_timeout, closing)
    attempt = session.make_connection
    async def make_connection(host, port):  # what 3.11's wait_for does when cancelled as the attempt ends
        try:
            await asyncio.sleep(5)  # a slow attempt: the exit's one cancellation lands in it
            return await attempt(host, port)
        except asyncio.CancelledError:
            return None
    session.make_connection = make_connection
    return failures
zk_protocol.hook_connections = swallowing
import jobboard_zookeeper.zk as zk
zk.hook_connections = swallowing

async def main():
    try:
        async with open_board(sys.argv[1]):
            pass
    except BackendUnavailable:
        print("unreachable", flush=True)
asyncio.run(main())
print("exited", flush=True)
"""


def test_a_board_that_could_not_connect_lets_the_process_exit_even_if_a_cancellation_is_swallowed() -> None:
    with refused_port() as port:
        child = subprocess.Popen([sys.executable, "-c", SWALLOWING, f"zookeeper://127.0.0.1:{port}/x?connect_timeout=0.5"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
    assert out.split() == ["unreachable", "exited"], (out, err[-2000:])
