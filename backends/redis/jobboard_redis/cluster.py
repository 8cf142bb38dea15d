"""Redis Cluster: which master serves the board's hash slot (``?cluster=1``; docs/backends/redis.md).

Every key of a board carries the same hash tag (``jb:{<root>}:``), so the whole board lives in ONE slot
and so on one master at a time: the client talks to that master as it would to a lone server. This module
finds it: :class:`SlotMap` asks the nodes it knows (the URL's seeds, then every node a map named) for
``CLUSTER SLOTS``, and returns the master of the slot. It is asked at every (re)connection, as the Sentinels
are: a ``MOVED`` reply (the slot has another master: a failover, a resharding) or a lost connection drops
the board's connection, and the next attempt asks again, within the call's retry window.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import Any

from jobboard_redis.client_wire import Arg, ConnectionLost, Refused, ServerError, connect

logger = logging.getLogger(__name__)

SLOTS = 16384

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
    """Finds the master serving one slot; remembers every node the cluster named, to ask them next time."""

    def __init__(self, seeds: Sequence[tuple[str, int]], slot: int, *, tls: ssl.SSLContext | None,
                 hello: Sequence[Sequence[Arg]]) -> None:
        self.slot = slot
        self._known: list[tuple[str, int]] = list(dict.fromkeys(seeds))
        self._tls = tls
        self._hello = [list(command) for command in hello]
        self.master: tuple[str, int] | None = None
        """The master the last map named (``None``: not asked yet)."""

    async def find_master(self, connect_timeout: float) -> tuple[str, int]:
        """The address of the slot's master, from the first node that answers ``CLUSTER SLOTS``
        (the last master named is asked first: it knows best after a failover it took part in).

        :raises ConnectionLost: no node answered, or none named a master for the slot (the cluster is down
            or failing over); :class:`Refused` if every node refused the connection.
        """
        refusing = []
        order = [self.master] if self.master else []
        for host, port in dict.fromkeys([*order, *self._known]):
            try:
                wire, replies = await connect(host, port, reply_timeout=5.0, connect_timeout=connect_timeout,
                                              tls=self._tls, hello=[*self._hello, ["CLUSTER", "SLOTS"]])
            except (ConnectionLost, ServerError) as error:
                logger.debug("Redis Cluster node %s:%s: %s", host, port, error)
                refusing += [(host, port)] if isinstance(error, Refused) else []
                continue
            wire.close()
            master = self._learn(replies[-1], host)
            if master is not None:
                self.master = master
                return master
        if len(refusing) == len(self._known):
            raise Refused(f"every Redis Cluster node refused the connection: {_names(refusing)}")
        raise ConnectionLost(f"no Redis Cluster node named a master for slot {self.slot} (asked {_names(self._known)})")

    def _learn(self, slots: Any, asked: str) -> tuple[str, int] | None:
        """Remember the nodes of a ``CLUSTER SLOTS`` reply; return the master of :attr:`slot`, if one serves it."""
        found = None
        for entry in slots if isinstance(slots, list) else []:
            nodes = [_address(node, asked) for node in entry[2:]]
            self._known.extend(node for node in nodes if node not in self._known)
            if int(entry[0]) <= self.slot <= int(entry[1]):
                found = nodes[0]
        return found


def _address(node: Any, asked: str) -> tuple[str, int]:
    """A node's (host, port) from ``CLUSTER SLOTS`` (an empty or ``?`` host is the one asked)."""
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return (host if host and host != "?" else asked), int(node[1])


def _names(addresses: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{host}:{port}" for host, port in addresses)
