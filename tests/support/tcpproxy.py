"""A loopback TCP proxy for fault tests: forward, drop, or black-hole a connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Self

HOST = "127.0.0.1"
LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class TcpProxy:
    """Asyncio loopback proxy to (host, port) that can drop or black-hole traffic."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 5.0) -> None:
        self.target = (host, port)
        self.connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.close_timeout = 5.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The listening port (after start())."""
        if self._port is None:
            raise RuntimeError("TcpProxy not started")
        return self._port

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT`` of the proxy."""
        return f"{HOST}:{self.port}"

    async def start(self) -> None:
        """Listen on 127.0.0.1 on a free port."""
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        self._port = int(self._server.sockets[0].getsockname()[1])

    def drop(self) -> None:
        """Reset (RST, not FIN) every current connection on both sides."""
        for writer in list(self._writers):
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()

    def pause(self) -> None:
        """Black-hole: keep/accept connections but forward no bytes."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again, including bytes held while paused."""
        self._flowing.set()

    async def aclose(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        self.drop()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.close_timeout)
        if self._server is not None:
            await asyncio.wait_for(self._server.wait_closed(), self.close_timeout)
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        writers = [writer]
        self._writers.add(writer)
        try:
            await self._flowing.wait()  # connections made while paused are held
            connect = asyncio.open_connection(*self.target)
            up_reader, up_writer = await asyncio.wait_for(connect, self.connect_timeout)
            writers.append(up_writer)
            self._writers.add(up_writer)
            await self._splice((reader, up_writer), (up_reader, writer))
        except (OSError, TimeoutError, asyncio.CancelledError):
            pass  # top-level connection task: ending it is the point of drop()/aclose()
        finally:
            for each in writers:
                each.transport.abort()
                self._writers.discard(each)
            self._tasks.discard(task)

    async def _splice(self, *pairs: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        pumps = {asyncio.ensure_future(self._pump(r, w)) for r, w in pairs}
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
        await self._flowing.wait()  # while paused, even a close is not passed on
