"""Encoding multis and decoding replies and watch events without aiozk's generic ``Part`` code.

aiozk renders and parses every field through a tree of ``Part`` objects: about 40 % of a
busy board's CPU. Multis (every post, claim and settle) and watch events (several per
job) are encoded here with one ``struct`` call per operation; every other request and
reply still goes through aiozk. The bytes on the wire are the same.
With :mod:`jobboard_zookeeper.zk`, :mod:`.zk_session` and :mod:`.zk_protocol`, the only
modules that import aiozk.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiozk import exc, protocol

from jobboard_zookeeper.ops import Check, Create, Delete, Op, SetData, Stat

MULTI = 14
MULTI_READ = 22
GET_DATA = 4
_INT = struct.Struct(">i")
_REPLY = struct.Struct(">iqi")
_HEADER = struct.Struct(">ibi")
_EVENT = struct.Struct(">iii")
_STAT = struct.Struct(">qqqqiiiqiiq")
_FOOTER = _HEADER.pack(-1, True, -1)
_OPCODES = {Create: 1, Delete: 2, SetData: 5, Check: 13}


def _string(value: bytes) -> bytes:
    return _INT.pack(len(value)) + value


def encode_acl(acl: Sequence[Any]) -> bytes:
    """An aiozk ACL list as it goes on the wire (a vector of perms, scheme, id)."""
    parts = [_INT.pack(len(acl))]
    for entry in acl:
        parts += [_INT.pack(entry.perms), _string(entry.id.scheme.encode()), _string(entry.id.id.encode())]
    return b"".join(parts)


class MultiRequest(protocol.TransactionRequest):  # type: ignore[misc]
    """A TransactionRequest for aiozk's ``Connection.send``, encoded here (``requests``, aiozk's
    view of the operations, is built only when asked for: tests look at it)."""

    opcode = MULTI
    special_xid = None
    path = "(multi)"

    def __init__(self, ops: Sequence[Op], acl: bytes, acl_parts: Sequence[Any] = ()) -> None:
        self.ops, self.acl, self._acl_parts = ops, acl, acl_parts

    @property
    def requests(self) -> list[Any]:
        return [_aiozk_request(op, self._acl_parts) for op in self.ops]

    def serialize(self, xid: int | None = None) -> bytes:
        parts = [struct.pack(">ii", xid or 0, MULTI)]
        acl = self.acl
        for op in self.ops:
            path = op.path.encode()
            if isinstance(op, Create):
                parts.append(struct.pack(f">ibii{len(path)}si{len(op.data)}s", 1, False, -1, len(path), path,
                                         len(op.data), op.data))
                parts += [acl, _INT.pack(1 if op.ephemeral else 0)]
            elif isinstance(op, SetData):
                parts.append(struct.pack(f">ibii{len(path)}si{len(op.data)}si", 5, False, -1, len(path), path,
                                         len(op.data), op.data, op.version))
            else:
                parts.append(struct.pack(f">ibii{len(path)}si", _OPCODES[type(op)], False, -1, len(path), path,
                                         op.version))
        parts.append(_FOOTER)
        return b"".join(parts)

    def __str__(self) -> str:
        return f"Txn[{len(self.ops)} ops]"


class MultiReadRequest:
    """Several ``getData`` in one request (``multiRead``, ZooKeeper 3.6+; not atomic, no watch)."""

    opcode = MULTI_READ
    special_xid = None
    path = "(multi read)"

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths

    def serialize(self, xid: int | None = None) -> bytes:
        parts = [struct.pack(">ii", xid or 0, MULTI_READ)]
        for path in self.paths:
            raw = path.encode()
            parts.append(struct.pack(f">ibii{len(raw)}sb", GET_DATA, False, -1, len(raw), raw, False))
        parts.append(_FOOTER)
        return b"".join(parts)

    def __str__(self) -> str:
        return f"MultiRead[{len(self.paths)} paths]"


class ReadReply:
    """Per path: ``(data, stat)`` or the error code of that read."""

    __slots__ = ("results",)

    def __init__(self, results: list[tuple[bytes, Stat] | int]) -> None:
        self.results = results


def decode_multi_read(frame: bytes, at: int) -> ReadReply:
    results: list[tuple[bytes, Stat] | int] = []
    while True:
        kind, done, error = _HEADER.unpack_from(frame, at)
        at += _HEADER.size
        if done:
            return ReadReply(results)
        if kind == -1:
            (code,) = _INT.unpack_from(frame, at)
            at += 4
            results.append(code or error)
            continue
        (size,) = _INT.unpack_from(frame, at)
        at += 4
        data = frame[at:at + max(size, 0)]
        at += max(size, 0)
        czxid, mzxid, _, mtime, version, _, _, owner, _, children, _ = _STAT.unpack_from(frame, at)
        results.append((data, Stat(version, czxid, mzxid, children, owner, mtime / 1000)))
        at += _STAT.size


def _aiozk_request(op: Op, acl: Sequence[Any]) -> Any:
    if isinstance(op, Create):
        request = protocol.CreateRequest(path=op.path, data=op.data, acl=list(acl))
        request.set_flags(ephemeral=op.ephemeral)
        return request
    if isinstance(op, Delete):
        return protocol.DeleteRequest(path=op.path, version=op.version)
    if isinstance(op, SetData):
        return protocol.SetDataRequest(path=op.path, data=op.data, version=op.version)
    return protocol.CheckVersionRequest(path=op.path, version=op.version)


class Written:
    """One successful operation of a multi; ``stat`` (with ``version``) for a set_data."""

    __slots__ = ("stat",)

    def __init__(self, stat: Any = None) -> None:
        self.stat = stat


class Version:
    __slots__ = ("modified", "version")

    def __init__(self, version: int, modified: int) -> None:
        self.version = version
        self.modified = modified
        """The node's mtime: the server's clock at the write, in ms (as aiozk names it)."""


class MultiReply:
    __slots__ = ("responses",)

    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses


def decode_multi(frame: bytes, at: int) -> MultiReply:
    """A multi's reply: per operation ``Written`` or an aiozk error (as aiozk gives them)."""
    responses: list[Any] = []
    while True:
        kind, done, _ = _HEADER.unpack_from(frame, at)
        at += _HEADER.size
        if done:
            return MultiReply(responses)
        if kind == -1:
            (code,) = _INT.unpack_from(frame, at)
            at += 4
            responses.append(exc.get_response_error(code))
        elif kind in (1, 15):  # create (path), create2 (path, stat)
            (size,) = _INT.unpack_from(frame, at)
            at += 4 + max(size, 0)
            if kind == 15:
                at += _STAT.size
            responses.append(Written())
        elif kind == 5:
            stat = _STAT.unpack_from(frame, at)
            responses.append(Written(Version(stat[4], stat[3])))
            at += _STAT.size
        else:
            responses.append(Written())


def decode_event(frame: bytes, at: int) -> Any:
    kind, state, size = _EVENT.unpack_from(frame, at)
    at += _EVENT.size
    event = protocol.WatchEvent.__new__(protocol.WatchEvent)
    event.type, event.state = kind, state
    event.path = frame[at:at + size].decode() if size >= 0 else None
    return event


def fast_reader(conn: Any) -> Callable[..., Awaitable[tuple[Any, Any, Any]]]:
    """``Connection.read_response`` reading each frame whole (a plain ``readexactly``: see
    ``zk_protocol.plain_reader``) and decoding multi replies and watch events here."""
    original = conn.read_response
    xrefs, specials = conn.opcode_xref, conn.pending_specials

    async def read_response(initial_connect: bool = False) -> tuple[Any, Any, Any]:
        if initial_connect or specials[protocol.CLOSE_XID]:
            return await original(initial_connect)  # type: ignore[no-any-return]
        try:
            (size,) = _INT.unpack(await conn.reader.readexactly(4))
            frame = await conn.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise ConnectionAbortedError from None
        xid, zxid, error = _REPLY.unpack_from(frame)
        if error:
            xrefs.pop(xid)
            return xid, zxid, exc.get_response_error(error)
        if xid == protocol.WATCH_XID:
            return xid, zxid, decode_event(frame, _REPLY.size)
        opcode = xrefs.pop(xid)
        if opcode == MULTI:
            return xid, zxid, decode_multi(frame, _REPLY.size)
        if opcode == MULTI_READ:
            return xid, zxid, decode_multi_read(frame, _REPLY.size)
        return xid, zxid, protocol.response_xref[opcode].deserialize(frame[_REPLY.size:])

    return read_response
