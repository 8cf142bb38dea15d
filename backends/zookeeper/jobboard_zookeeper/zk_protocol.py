"""The pieces of the ZooKeeper protocol that aiozk 0.32 lacks or gets in the way of.

With :mod:`jobboard_zookeeper.zk`, the only modules that import aiozk.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
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
