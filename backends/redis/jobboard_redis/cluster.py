"""Redis Cluster: which master serves the board's hash slot (``?cluster=1``; docs/backends/redis.md).

Every key of a board carries the same hash tag (``jb:{<root>}:``), so the whole board lives in ONE slot
and so on one master at a time: the client talks to that master as it would to a lone server. This module
finds it: :class:`SlotMap` asks the nodes it knows (the URL's seeds, then every node a map named) for
``CLUSTER SLOTS``, and returns the master of the slot. It is asked at every (re)connection, as the Sentinels
are: a ``MOVED`` reply (the slot has another master: a failover, a resharding) or a lost connection drops
the board's connection, and the next attempt asks again, within the call's retry window.

A frozen master (SIGSTOP, a stalled VM) keeps its connections open and answers nothing: the connection that
waited the reply timeout for it tells the map (:meth:`SlotMap.silent`), which then asks it last and does not
name it as the slot's master while it is held silent, so the retries poll the other nodes until the cluster
promotes its replica, instead of waiting on it again.
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from collections.abc import Sequence
from typing import Any

from jobboard_redis.client_wire import Arg, ConnectionLost, Refused, ServerError, connect

logger = logging.getLogger(__name__)

SLOTS = 16384
POLL_EVERY = 0.25
SILENT_FOR = 60.0
"""Seconds a node's silence counts with the cluster's ``fail?``/``fail`` flag (longer than a failover takes at
Redis's default 15 s node timeout): a master flagged by the node asked that was silent this recently is passed
over; one silent longer ago is tried again (if still frozen, it is silent again)."""
"""Seconds between asks of the nodes while the slot's master is passed over (every connection of every
board retries meanwhile: one ask per board's map in each such interval)."""

__all__ = ["SLOTS", "SlotMap", "crc16", "key_slot"]


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str | bytes) -> int:
    """The hash slot of ``key``: of its hash tag (the text between the first ``{`` and the next ``}``,
    if not empty), else of the whole key."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    return crc16(data) % SLOTS


class SlotMap:
    """Finds the master serving one slot; remembers every node the cluster named, to ask them next time, and
    which of them left a command unanswered (a frozen node is asked last, and not connected to as the slot's
    master while it is held to be silent)."""

    def __init__(self, seeds: Sequence[tuple[str, int]], slot: int, *, tls: ssl.SSLContext | None,
                 hello: Sequence[Sequence[Arg]], reply_timeout: float) -> None:
        self.slot = slot
        self._known: list[tuple[str, int]] = list(dict.fromkeys(seeds))
        self._tls = tls
        self._hello = [list(command) for command in hello]
        self.reply_timeout = reply_timeout
        """Seconds a node is given to answer; a silent node is passed over this long."""
        self._silent: dict[tuple[str, int], float] = {}
        """When each node last left a command unanswered (monotonic)."""
        self._waiting: tuple[float, str] | None = None
        """(when, why) the last ask named a master passed over: asked again :data:`POLL_EVERY` later."""
        self.master: tuple[str, int] | None = None
        """The master the last map named (``None``: not asked yet)."""

    def silent(self, address: str) -> None:
        """Note that the node at ``host:port`` left a command (or a new connection) unanswered."""
        host, _, port = address.rpartition(":")
        if port.isdigit():
            self._silent[host, int(port)] = time.monotonic()

    async def find_master(self, connect_timeout: float) -> tuple[str, int]:
        """The address of the slot's master, from the first node that answers ``CLUSTER SLOTS`` (the nodes
        that were silent last, in the order of their silence; each given the reply timeout at most).

        :raises ConnectionLost: no node answered, or none named a master for the slot (the cluster is down
            or failing over), or the master named is held to be silent (:meth:`_passed_over`: the cluster
            has not failed it over yet); :class:`Refused` if every node refused the connection.
        """
        if self._waiting is not None and time.monotonic() - self._waiting[0] < POLL_EVERY:
            raise ConnectionLost(self._waiting[1])
        self._waiting, refusing = None, []
        for host, port in sorted(self._known, key=lambda node: self._silent.get(node, 0.0)):
            try:
                slots, nodes = await self._ask(host, port, connect_timeout)
            except (ConnectionLost, ServerError) as error:
                logger.debug("Redis Cluster node %s:%s: %s", host, port, error)
                refusing += [(host, port)] if isinstance(error, Refused) else []
                continue
            master = self._learn(slots, host)
            if master is None:
                continue
            self.master = master
            if self._passed_over(master, failing(nodes, master, host)):
                why = (f"Redis Cluster master {_names([master])} of slot {self.slot} is not answering "
                       f"(asked {host}:{port}); waiting for its failover")
                self._waiting = (time.monotonic(), why)
                raise ConnectionLost(why)
            return master
        if len(refusing) == len(self._known):
            raise Refused(f"every Redis Cluster node refused the connection: {_names(refusing)}")
        raise ConnectionLost(f"no Redis Cluster node named a master for slot {self.slot} (asked {_names(self._known)})")

    async def _ask(self, host: str, port: int, connect_timeout: float) -> tuple[Any, Any]:
        """``CLUSTER SLOTS`` and ``CLUSTER NODES`` of one node, within the reply timeout at most.

        :raises ConnectionLost, ServerError: see :func:`~jobboard_redis.client_wire.connect`.
        """
        wire, replies = await connect(host, port, reply_timeout=self.reply_timeout,
                                      connect_timeout=min(connect_timeout, self.reply_timeout), tls=self._tls,
                                      hello=[*self._hello, ["CLUSTER", "SLOTS"], ["CLUSTER", "NODES"]],
                                      on_silent=self.silent)
        wire.close()
        return replies[-2], replies[-1]

    def _passed_over(self, master: tuple[str, int], flagged: bool) -> bool:
        """Whether not to connect to ``master`` now: it was silent within the reply timeout, or within
        :data:`SILENT_FOR` and the cluster flags it failing (``fail?``: unreachable from the node asked;
        ``fail``: agreed) - a frozen master, about to be failed over. One not silent lately is always tried."""
        ago = time.monotonic() - self._silent.get(master, -math.inf)
        return ago < self.reply_timeout or (flagged and ago < SILENT_FOR)

    def _learn(self, slots: Any, asked: str) -> tuple[str, int] | None:
        """Remember the nodes of a ``CLUSTER SLOTS`` reply; return the master of :attr:`slot`, if one serves it."""
        found = None
        for entry in slots if isinstance(slots, list) else []:
            nodes = [_address(node, asked) for node in entry[2:]]
            self._known.extend(node for node in nodes if node not in self._known)
            if int(entry[0]) <= self.slot <= int(entry[1]):
                found = nodes[0]
        return found


def failing(nodes: Any, master: tuple[str, int], asked: str) -> bool:
    """Whether a ``CLUSTER NODES`` reply flags ``master`` ``fail?`` or ``fail``."""
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        host, _, port = fields[1].split("@", 1)[0].split(",", 1)[0].rpartition(":")
        if port.isdigit() and ((host or asked), int(port)) == master:
            return bool({"fail", "fail?"} & set(fields[2].split(",")))
    return False


def _address(node: Any, asked: str) -> tuple[str, int]:
    """A node's (host, port) from ``CLUSTER SLOTS`` (an empty or ``?`` host is the one asked)."""
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return (host if host and host != "?" else asked), int(node[1])


def _names(addresses: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{host}:{port}" for host, port in addresses)
