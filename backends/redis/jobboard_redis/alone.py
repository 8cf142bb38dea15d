"""``durability=strict`` through Sentinels, on a primary with no replica in sync: is it still the primary?

A write answered by a primary alone (no replica to ``WAIT`` for) is lost if that primary is no longer
the primary: its replica was promoted (``SENTINEL FAILOVER``, or a failover after a partition), and the
old primary goes on answering writes alone until the Sentinels turn it into a replica, about 10 s later,
discarding them. Nothing on the old primary tells: its ``ROLE`` is that of a primary without replicas.
And the board's view of "no replica" may be up to a second old (:mod:`.replication` looks again at most
once a second), so a replica may have come and been promoted in between.

So such a write is acknowledged only once, after its reply came, (1) a Sentinel still names the server
as the primary and (2) no replica the Sentinels know of (and do not flag down) was promoted from it: a
promoted replica answers at once as a primary whose ``master_replid2`` (the history it continues) is
the server's ``master_replid``, about a second before the Sentinels name it. (The old primary of a
failover, listed as a replica of the new one, answers as a primary for about 10 s too, until the
Sentinels demote it; it does not continue the new primary's history, and is not counted.) A replica
in sync with the server, come since the board last looked, makes the write be sent again too: the
(re)connection learns it, and the write waits for it (``WAIT``). A replica
that cannot be asked in :data:`ASK_WITHIN` is not counted (a partitioned promoted replica is not
seen; the Sentinels name it a second or so later). Writes answered together share one check (a check
covers the writes answered before it started), on connections kept from one check to the next.
Boards without Sentinels need none of this.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any

from jobboard_redis.client_wire import Arg, ConnectionLost, ServerError, Wire, connect
from jobboard_redis.records import text

__all__ = ["ASK_WITHIN", "AloneCheck"]

ASK_WITHIN = 1.0
"""Seconds a Sentinel or a replica has to answer one check."""
DOWN_FLAGS = ("s_down", "o_down", "disconnected")


class AloneCheck:
    """The check of writes answered by a primary alone; see the module docstring."""

    def __init__(self, sentinels: Sequence[tuple[str, int]], service: str, *, tls: ssl.SSLContext | None,
                 auth: Sequence[Sequence[Arg]]) -> None:
        self.sentinels = sentinels
        self.service = service
        self._tls, self._auth = tls, auth
        self._answered = 0
        """Writes whose reply came, so far (a check started after the n-th covers it)."""
        self._round: tuple[int, str, asyncio.Future[None]] | None = None
        """The last check: (writes it covers, of which server, its outcome)."""
        self._wires: dict[tuple[str, int], Wire] = {}
        """This check's connections, kept from one check to the next."""

    async def confirm(self, address: str) -> None:
        """After a write's reply from ``address`` (its connection's ``host:port``): return once that server is
        known to be the primary.

        :raises ConnectionLost: the Sentinels name another server, or a replica says it is a primary
            (the write is to be sent again with its nonce, to the primary the Sentinels name).
        """
        self._answered += 1
        mine = self._answered
        while True:
            last = self._round
            if last is not None and last[0] >= mine and last[1] == address:
                return await asyncio.shield(last[2])
            if last is not None and not last[2].done():  # started before this reply: the next one
                await asyncio.wait([last[2]])
                continue
            self._round = (self._answered, address, asyncio.ensure_future(self._check(address)))

    async def _check(self, address: str) -> None:
        named, replicas = await self._sentinel_view()
        if named != address:
            raise ConnectionLost(f"the Sentinels name {named} as the primary now, not {address}")
        answers = await asyncio.gather(*(self._replication(replica) for replica in replicas))
        if any(_follows(answer, address) for answer in answers):  # come since the board last looked
            raise ConnectionLost(f"{address} has a replica in sync: the write waits for it")
        successors = [answer.get("master_replid2") for answer in answers if answer.get("role") == "master"]
        if not successors:
            return
        host, _, port = address.rpartition(":")
        mine = (await self._replication((host, int(port)))).get("master_replid", "?")
        if mine in successors:
            raise ConnectionLost(f"a replica of {address} was promoted (it continues {address}'s history as a "
                                 f"primary): a failover is under way")

    async def _replication(self, server: tuple[str, int]) -> dict[str, str]:
        """``INFO replication`` of ``server``; empty if it cannot be asked in time."""
        try:
            (info,) = await self._ask(server, [["INFO", "replication"]], tls=self._tls, hello=self._auth)
        except (ConnectionLost, ServerError, TimeoutError):
            return {}
        lines = text(info).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line)

    async def _sentinel_view(self) -> tuple[str, list[tuple[str, int]]]:
        """(the primary a Sentinel names, the replicas it knows and does not flag down).

        :raises ConnectionLost: no Sentinel answered."""
        asked: list[list[Arg]] = [["SENTINEL", "get-master-addr-by-name", self.service],
                                  ["SENTINEL", "replicas", self.service]]
        for sentinel in self.sentinels:
            try:
                address, replicas = await self._ask(sentinel, asked, tls=None, hello=[])
            except (ConnectionLost, ServerError, TimeoutError):
                continue
            if address:
                return f"{text(address[0])}:{text(address[1])}", _up(replicas)
        raise ConnectionLost(f"no Sentinel named a primary for {self.service!r}")

    async def _ask(self, server: tuple[str, int], commands: list[list[Arg]], *, tls: ssl.SSLContext | None,
                   hello: Sequence[Sequence[Arg]]) -> list[Any]:
        """``commands``' replies, on this check's connection to ``server`` (made, or made again, if need be).

        :raises ConnectionLost, ServerError, TimeoutError: no answer within :data:`ASK_WITHIN`."""
        wire = self._wires.get(server)
        if wire is None or wire.failed is not None:
            wire, _ = await connect(*server, reply_timeout=ASK_WITHIN, connect_timeout=ASK_WITHIN, tls=tls,
                                    hello=hello)
            self._wires[server] = wire
        try:
            async with asyncio.timeout(ASK_WITHIN):
                replies = list(await asyncio.gather(*(wire.send(command) for command in commands)))
        except TimeoutError:
            wire.close()
            raise
        for reply in replies:
            if isinstance(reply, ServerError):
                raise reply
        return replies

    def close(self) -> None:
        """Close this check's connections (to the Sentinels and the replicas)."""
        for wire in self._wires.values():
            wire.close()
        self._wires.clear()


def _follows(info: dict[str, str], address: str) -> bool:
    """Whether ``INFO replication`` is that of a replica of ``address`` in sync with it."""
    return (info.get("role") == "slave" and info.get("master_link_status") == "up"
            and f"{info.get('master_host')}:{info.get('master_port')}" == address)


def _up(replicas: Any) -> list[tuple[str, int]]:
    """The (ip, port) of each replica in ``SENTINEL replicas``' reply not flagged down."""
    found = []
    for entry in replicas if isinstance(replicas, list) else []:
        fields = dict(zip(map(text, entry[::2]), map(text, entry[1::2]), strict=True))
        if not any(flag in fields.get("flags", "") for flag in DOWN_FLAGS):
            found.append((fields["ip"], int(fields["port"])))
    return found

