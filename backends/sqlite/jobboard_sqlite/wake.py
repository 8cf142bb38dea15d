"""Doorbells: how one session tells another, in any process on the host, that something changed for it.

Each session binds a unix datagram socket in the abstract namespace (Linux: no file to clean up, freed
with the process). A ring is one datagram; a full or gone socket drops it (the slow fallback poll of
``PRAGMA data_version`` covers a lost ring). Sessions of this process are rung directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Callable

_LOCAL: dict[str, Callable[[], None]] = {}
"""The sessions of this process, by id: rung without a datagram."""


class Doorbell:
    """This session's socket; ``on_ring`` runs (on the event loop) for every ring."""

    def __init__(self, session: str, on_ring: Callable[[], None]) -> None:
        self.session, self.on_ring = session, on_ring
        self.address = b""
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        _LOCAL[self.session] = self.on_ring
        if not sys.platform.startswith("linux"):
            return  # no abstract namespace: other processes rely on the fallback poll
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        address = b"\0jobboard-" + self.session.encode()
        sock.bind(address)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._drain)
        self._sock, self.address = sock, address

    def _drain(self) -> None:
        assert self._sock is not None
        rung = False
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                self._sock.recv(64)
                rung = True
        if rung:
            self.on_ring()

    def close(self) -> None:
        _LOCAL.pop(self.session, None)
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None


_SENDER: socket.socket | None = None


def ring(session: str, address: bytes | None) -> None:
    """Ring ``session``'s doorbell (directly in this process, else one datagram; never raises)."""
    local = _LOCAL.get(session)
    if local is not None:
        local()
        return
    if not address:
        return
    global _SENDER
    if _SENDER is None:
        _SENDER = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    with contextlib.suppress(OSError):
        _SENDER.sendto(b"!", address)
