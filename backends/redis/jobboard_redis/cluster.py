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
promotes its replica, instead of waiting on it again. Meanwhile a probe (a new connection's ``PING``, given the
reply timeout) races those polls: a master that answers it (a healthy one that only stalled: a fork, an fsync,
a loaded host) is no longer silent and is used again at once.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Sequence
from typing import Any

from jobboard_redis.client_wire import Arg, ConnectionLost, Refused, ServerError, connect

logger = logging.getLogger(__name__)

SLOTS = 16384
POLL_EVERY = 0.25
"""Seconds between asks of the nodes while the slot's master is passed over (every connection of every
board retries meanwhile: one ask per board's map in each such interval; a caller within it waits on the probe)."""
SILENT_FOR = 60.0
"""Seconds a node's silence counts with the cluster's ``fail?``/``fail`` flag (longer than a failover takes at
Redis's default 15 s node timeout): a master flagged by the node asked that was silent this recently is passed
over; one silent longer ago is tried again (if still frozen, it is silent again)."""

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
    master while it is held to be silent: until it answers a probe). Owns its probe task (:meth:`close`)."""

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
        self._thawed: dict[tuple[str, int], float] = {}
        """For a node that answered a probe since: when it was last silent before that (see :meth:`_passed_over`)."""
        self._waiting: tuple[float, str] | None = None
        """(when, why) the last ask named a master passed over: asked again :data:`POLL_EVERY` later."""
        self._probe: asyncio.Task[bool] | None = None
        """The probe of :attr:`_probed` in flight, or the last one (:meth:`_probing`)."""
        self._probed: tuple[str, int] | None = None
        self.master: tuple[str, int] | None = None
        """The master the last map named (``None``: not asked yet)."""

    def silent(self, address: str) -> None:
        """Note that the node at ``host:port`` left a command (or a new connection) unanswered."""
        host, _, port = address.rpartition(":")
        if port.isdigit():
            self._silent[host, int(port)] = time.monotonic()

    async def find_master(self, connect_timeout: float) -> tuple[str, int]:
        """The address of the slot's master, from the first node that answers ``CLUSTER SLOTS`` (the nodes
        that were silent last, in the order of their silence; each given the reply timeout at most). While
        the master named is passed over, the nodes are asked every :data:`POLL_EVERY` at most, and a caller
        in between waits the rest of that interval on the probe of it (if it answers, the nodes are asked
        again at once).

        :raises ConnectionLost: no node answered, or none named a master for the slot (the cluster is down
            or failing over), or the master named is held to be silent (:meth:`_passed_over`: the cluster
            has not failed it over yet, and it has not answered the probe); :class:`Refused` if every node
            refused the connection.
        """
        for _ in range(2):  # asked again only after the probe answered
            waiting = self._waiting
            if waiting is not None:
                left = waiting[0] + POLL_EVERY - time.monotonic()
                if left > 0 and not await self._answered_within(left):
                    raise ConnectionLost(waiting[1])
            master = await self._ask_nodes(connect_timeout)
            if master is not None:
                return master
        assert self._waiting is not None
        raise ConnectionLost(self._waiting[1])

    async def _ask_nodes(self, connect_timeout: float) -> tuple[str, int] | None:
        """:meth:`find_master`'s ask: the master, or ``None`` if it is passed over (:attr:`_waiting` says
        why, and a probe of it is started if none is in flight).

        :raises ConnectionLost, Refused: see :meth:`find_master`.
        """
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
            if self._passed_over(master, flag(nodes, master, host)):
                why = (f"Redis Cluster master {_names([master])} of slot {self.slot} is not answering "
                       f"(asked {host}:{port}); waiting for it to answer or for its failover")
                self._waiting = (time.monotonic(), why)
                self._probing(master)
                return None
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

    def _passed_over(self, master: tuple[str, int], flagged: str) -> bool:
        """Whether not to connect to ``master`` now: a probe of it is in flight, or it was silent within the
        reply timeout, or within :data:`SILENT_FOR` and the cluster flags it failing (``flagged``: ``fail?``,
        unreachable from the node asked; ``fail``, agreed) - a frozen master, about to be failed over. One that
        answered a probe since its last silence is tried unless the cluster has *agreed* it failed within
        :data:`SILENT_FOR` of that silence (thawed between the agreement and its replica's promotion: what it
        acknowledged before its demotion would be lost with it); one not silent lately is tried."""
        now = time.monotonic()
        if master not in self._silent:
            thawed = self._thawed.get(master)
            return flagged == "fail" and thawed is not None and now - thawed < SILENT_FOR
        probe = self._probe
        ago = now - self._silent[master]
        return (ago < self.reply_timeout or (bool(flagged) and ago < SILENT_FOR)
                or (self._probed == master and probe is not None and not probe.done()))

    def _probing(self, master: tuple[str, int]) -> None:
        """Start a probe of ``master`` unless one is in flight (a probe of another node is cancelled)."""
        probe = self._probe
        if probe is not None and not probe.done():
            if self._probed == master:
                return
            probe.cancel()
        self._probed = master
        self._probe = asyncio.get_running_loop().create_task(self._answers(master))

    async def _answers(self, node: tuple[str, int]) -> bool:
        """Whether ``node`` answers ``PING`` on a new connection within the reply timeout: then its silence
        is forgotten and the nodes are asked again at the next call; if not, it is silent again (now).
        Never raises (but :class:`asyncio.CancelledError`)."""
        try:
            wire, _ = await connect(*node, reply_timeout=self.reply_timeout, connect_timeout=self.reply_timeout,
                                    tls=self._tls, hello=[*self._hello, ["PING"]], on_silent=self.silent)
        except ServerError:  # it answered (an error): it is not frozen
            pass
        except ConnectionLost as error:
            logger.debug("Redis Cluster node %s probed: %s", _names([node]), error)
            return False
        else:
            wire.close()
        if (silent := self._silent.pop(node, None)) is not None:
            self._thawed[node] = silent
        self._waiting = None
        logger.info("Redis Cluster node %s answers again", _names([node]))
        return True

    async def _answered_within(self, seconds: float) -> bool:
        """Whether the probe in flight (or the last one) found its node answering, waiting ``seconds`` at most."""
        probe = self._probe
        if probe is None:
            return False
        await asyncio.wait([probe], timeout=seconds)
        return probe.done() and not probe.cancelled() and probe.result()

    def close(self) -> None:
        """Cancel the probe in flight, if any."""
        if self._probe is not None:
            self._probe.cancel()

    def _learn(self, slots: Any, asked: str) -> tuple[str, int] | None:
        """Remember the nodes of a ``CLUSTER SLOTS`` reply; return the master of :attr:`slot`, if one serves it."""
        found = None
        for entry in slots if isinstance(slots, list) else []:
            nodes = [_address(node, asked) for node in entry[2:]]
            self._known.extend(node for node in nodes if node not in self._known)
            if int(entry[0]) <= self.slot <= int(entry[1]):
                found = nodes[0]
        return found


def flag(nodes: Any, master: tuple[str, int], asked: str) -> str:
    """How a ``CLUSTER NODES`` reply flags ``master``: ``"fail"`` (agreed), ``"fail?"`` (suspected by the node
    asked) or ``""``."""
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        host, _, port = fields[1].split("@", 1)[0].split(",", 1)[0].rpartition(":")
        if port.isdigit() and ((host or asked), int(port)) == master:
            flags = set(fields[2].split(","))
            return "fail" if "fail" in flags else "fail?" if "fail?" in flags else ""
    return ""


def _address(node: Any, asked: str) -> tuple[str, int]:
    """A node's (host, port) from ``CLUSTER SLOTS`` (an empty or ``?`` host is the one asked)."""
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return (host if host and host != "?" else asked), int(node[1])


def _names(addresses: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{host}:{port}" for host, port in addresses)
