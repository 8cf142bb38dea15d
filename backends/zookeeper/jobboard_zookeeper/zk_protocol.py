"""The pieces of the ZooKeeper protocol that aiozk 0.32 lacks or gets in the way of.

With :mod:`jobboard_zookeeper.zk`, the only modules that import aiozk.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from aiozk import exc, protocol
from aiozk.protocol.primitives import Int, UString

from jobboard_zookeeper.ops import Stat


class AddWatchRequest(protocol.request.Request):  # type: ignore[misc]
    """ZooKeeper 3.6+ ``addWatch`` (opcode 106), which aiozk lacks."""

    opcode = 106
    parts = (("path", UString), ("mode", Int))


class AddWatchResponse(protocol.response.Response):  # type: ignore[misc]
    opcode = 106
    parts = ()


PERSISTENT_RECURSIVE = 1


def digest_acl(username: str, password: str) -> list[Any]:
    """An ACL giving every permission to the digest identity ``username:password`` only."""
    digest = base64.b64encode(hashlib.sha1(f"{username}:{password}".encode()).digest()).decode()
    return [protocol.acl.ACL.make(scheme="digest", id=f"{username}:{digest}", read=True, write=True,
                              create=True, delete=True, admin=True)]


def plain_reader(conn: Any) -> Callable[[int], Awaitable[bytes]]:
    """aiozk wraps every chunk it reads in ``asyncio.wait_for`` (a task each on Python 3.11):
    a quarter of the CPU of a busy board. A plain ``readexactly`` is enough here, because
    the watchdog notices a stalled connection (its pings' replies stall behind the frame)."""

    async def read(size: int = -1) -> bytes:
        try:
            return bytes(await conn.reader.readexactly(size))
        except asyncio.IncompleteReadError as error:
            raise exc.UnfinishedRead() from error  # aiozk's read loop aborts the connection

    return read


def stat_of(raw: Any) -> Stat:
    return Stat(version=int(raw.version), czxid=int(raw.created_zxid), mzxid=int(raw.last_modified_zxid),
                num_children=int(raw.num_children), ephemeral_owner=int(raw.ephemeral_owner),
                mtime=int(raw.modified) / 1000)


RECONNECT_DELAYS = (0.05, 1.0)
"""First and longest pause between rounds of connection attempts (aiozk: 2, 4, 8 ... 60 s)."""


def prompt_find_server(session: Any) -> Callable[[bool], Awaitable[None]]:
    """aiozk's ``Session.find_server``, with pauses of at most a second between rounds: its own
    exponential back-off to 60 s kept a board away for seconds to a minute after an outage."""

    async def find_server(allow_read_only: bool) -> None:
        delay = RECONNECT_DELAYS[0]
        while True:
            for host, port in random.sample(session.hosts, len(session.hosts)):
                conn = await session.make_connection(host, port)
                if conn is None:
                    continue
                if conn.start_read_only and not allow_read_only:
                    asyncio.get_running_loop().create_task(conn.close(session.timeout))
                    continue
                old, session.conn = session.conn, conn
                if old is not None:
                    asyncio.get_running_loop().create_task(old.close(session.timeout))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_DELAYS[1])

    return find_server
