"""A ZooKeeper-aware fault proxy: one client's link to every member of an ensemble.

ZooKeeper frames are 4-byte big-endian length-prefixed in both directions. After
the connect handshake (the first frame each way), a request starts with its xid
and opcode, a reply with the same xid. So the proxy can forward a write and
drop *its reply* (the server applied it, the client never hears), or drop the
write itself, and reset the connection either way. It can also reset every
connection, and stall (black-hole) all traffic for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Self

from tests.support.tcpproxy import LINGER_RESET, TcpProxy

MULTI = 14
WRITES = frozenset({1, 2, 5, 14, 15})  # create, delete, setData, multi, create2
"""Opcodes of ZooKeeper writes."""

MAX_FRAME = 64 * 1024 * 1024
Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _string(frame: bytes, at: int) -> tuple[bytes, int]:
    (size,) = struct.unpack_from(">i", frame, at)
    at += 4
    return frame[at:at + max(size, 0)], at + max(size, 0)


def single_create(frame: bytes) -> bool:
    """Whether a request frame is a post of claimable jobs: a multi of creates only (but for a
    ``set_data`` of a counter: a chained post), one or more of them nodes ``.../jobs/<id>`` (the
    others: the write marker, keys), none a waiting job."""
    try:
        _, _, opcode = struct.unpack_from(">iii", frame)
        if opcode != MULTI:
            return False
        at, paths = 12, []
        while True:
            op_type, done, _ = struct.unpack_from(">ibi", frame, at)
            at += 9
            if op_type == -1 or done:
                jobs = [path for path in paths if re.search(rb"/jobs/[^/]+$", path)]
                return len(jobs) >= 1 and not any(b"/waiting/" in path for path in paths)
            if op_type == 5:  # set_data: path, data, version
                path, at = _string(frame, at)
                _, at = _string(frame, at)
                at += 4
                if b"/counters/" not in path:
                    return False
                continue
            if op_type != 1:
                return False
            path, at = _string(frame, at)
            _, at = _string(frame, at)  # data
            (acls,) = struct.unpack_from(">i", frame, at)
            at += 4
            for _ in range(acls):  # perms, scheme, id
                _, at = _string(frame, at + 4)
                _, at = _string(frame, at)
            at += 4  # flags
            paths.append(path)
    except struct.error:
        return False


class _Reset(Exception):
    """Ends one proxied connection with a reset on both sides."""


@dataclass
class Faults:
    """The armed one-shot faults of a link, and what was done (shared by its proxies)."""

    opcodes: frozenset[int] = frozenset({MULTI})
    lose_replies: int = 0
    """Writes still to be forwarded with their reply dropped."""
    lose_requests: int = 0
    """Writes still to be dropped before the server sees them."""
    posts_only: bool = False
    """Lose only the replies of multis that are one create (posts of claimable jobs)."""
    hold_after: float = 0.0
    """Seconds the link stays black-holed after a lost reply or request (the client cannot reconnect)."""
    done: Counter[str] = field(default_factory=Counter)
    """What happened: ``lost_reply``, ``lost_request``, ``reset``."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def note(self, kind: str) -> None:
        self.done[kind] += 1
        self.changed.set()

    async def happened(self, kind: str, times: int = 1) -> None:
        """Wait until ``kind`` happened ``times`` times in all."""
        while self.done[kind] < times:
            self.changed.clear()
            await self.changed.wait()


class FrameProxy(TcpProxy):
    """A :class:`TcpProxy` that forwards whole ZooKeeper frames and injects a link's faults."""

    def __init__(self, host: str, port: int, faults: Faults, link: FaultLink) -> None:
        super().__init__(host, port)
        self.faults, self.link = faults, link

    async def _splice(self, *pairs: Pair) -> None:
        (client, up_writer), (upstream, client_writer) = pairs
        doomed: set[int] = set()
        pumps = {asyncio.ensure_future(self._requests(client, up_writer, doomed)),
                 asyncio.ensure_future(self._replies(upstream, client_writer, doomed))}
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if any(not task.cancelled() and isinstance(task.exception(), _Reset) for task in done):
                for writer in (up_writer, client_writer):
                    with contextlib.suppress(OSError):
                        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                                   LINGER_RESET)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> AsyncIterator[bytes]:
        """Yield every frame read (the handshake frame is forwarded here, not yielded)."""
        first = True
        while True:
            try:
                header = await reader.readexactly(4)
                size = struct.unpack(">i", header)[0]
                if first and not 0 <= size <= MAX_FRAME:  # a four-letter word (aiozk sends srvr first)
                    await self._raw(header, reader, writer)
                    return
                body = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            await self._flowing.wait()
            if first:
                first = False
                writer.write(header + body)
                await writer.drain()
                continue
            yield header + body

    async def _raw(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = head
        while data:
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
            data = await reader.read(65536)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        doomed: set[int]) -> None:
        faults = self.faults
        async for frame in self._frames(reader, writer):
            xid, opcode = struct.unpack(">ii", frame[4:12]) if len(frame) >= 12 else (0, 0)
            if opcode in faults.opcodes and faults.lose_requests > 0 and (
                    not faults.posts_only or single_create(frame)):
                faults.lose_requests -= 1
                faults.note("lost_request")
                self.link.hold(faults.hold_after)
                raise _Reset
            if opcode in faults.opcodes and faults.lose_replies > 0 and (
                    not faults.posts_only or single_create(frame)):
                faults.lose_replies -= 1
                doomed.add(xid)
            writer.write(frame)
            await writer.drain()

    async def _replies(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       doomed: set[int]) -> None:
        async for frame in self._frames(reader, writer):
            xid = struct.unpack(">i", frame[4:8])[0] if len(frame) >= 8 else 0
            if xid in doomed:  # the server applied the write: the client never learns it
                self.faults.note("lost_reply")
                self.link.hold(self.faults.hold_after)
                raise _Reset
            writer.write(frame)
            await writer.drain()


class FaultLink:
    """One client's way to an ensemble: a :class:`FrameProxy` per member, sharing :class:`Faults`."""

    def __init__(self, targets: list[tuple[str, int]], *, opcodes: frozenset[int] = frozenset({MULTI})) -> None:
        self.faults = Faults(opcodes=opcodes)
        self.proxies = [FrameProxy(host, port, self.faults, self) for host, port in targets]
        self._resume: asyncio.TimerHandle | None = None

    @property
    def hosts(self) -> str:
        """``127.0.0.1:a,127.0.0.1:b,...``: the proxies, one per member."""
        return ",".join(proxy.hosts for proxy in self.proxies)

    async def start(self) -> Self:
        for proxy in self.proxies:
            await proxy.start()
        return self

    async def aclose(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
        for proxy in self.proxies:
            proxy.resume()
            await proxy.aclose()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def lose_reply(self, count: int = 1, *, hold: float = 0.0, posts_only: bool = False) -> None:
        """The next ``count`` writes reach the server; their replies are dropped and the link reset.

        :param posts_only: only writes that are a multi of one create.
        """
        self.faults.lose_replies += count
        self.faults.hold_after = hold
        self.faults.posts_only = posts_only

    def lose_request(self, count: int = 1, *, hold: float = 0.0, posts_only: bool = False) -> None:
        """The next ``count`` writes are dropped before the server sees them, and the link reset.

        :param posts_only: only writes that are posts (see :func:`single_create`).
        """
        self.faults.lose_requests += count
        self.faults.hold_after = hold
        self.faults.posts_only = posts_only

    def disarm(self) -> None:
        """Forget armed faults that did not fire yet."""
        self.faults.lose_replies = self.faults.lose_requests = 0

    def reset(self) -> None:
        """Reset (RST) every current connection."""
        self.faults.note("reset")
        for proxy in self.proxies:
            proxy.drop()

    def pause(self) -> None:
        """Black-hole the link until :meth:`resume` (connections are kept, bytes held)."""
        for proxy in self.proxies:
            proxy.pause()

    def resume(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        for proxy in self.proxies:
            proxy.resume()

    def hold(self, seconds: float) -> None:
        """Black-hole the link for ``seconds`` (new connections wait too)."""
        if seconds <= 0:
            return
        self.pause()
        if self._resume is not None:
            self._resume.cancel()
        self._resume = asyncio.get_running_loop().call_later(seconds, self.resume)

    async def stall(self, seconds: float) -> None:
        """Black-hole the link for ``seconds``, then forward again (held bytes included)."""
        self.pause()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.resume()
