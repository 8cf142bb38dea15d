"""Where the board's primary is: the URL's one server, the one the Sentinels name (``?sentinel=``), or the
master of the board's hash slot in a Redis Cluster (``?cluster=1``, :mod:`.cluster`). Asked at every
(re)connection of the board."""

from __future__ import annotations

import ssl

from jobboard_redis.alone import AloneCheck
from jobboard_redis.client_wire import Arg, ask_sentinels
from jobboard_redis.cluster import SlotMap, key_slot
from jobboard_redis.options import RedisOptions

__all__ = ["Locator"]


class Locator:
    """Finds the server a board's commands go to; :attr:`name` names it in messages."""

    def __init__(self, options: RedisOptions, tls: ssl.SSLContext | None) -> None:
        self.options = options
        self.tls = tls
        auth: list[list[Arg]] = ([["AUTH", *([options.username] if options.username else []), options.password]]
                                 if options.password is not None else [])
        self.auth = auth
        slot = key_slot(options.prefix)
        self.slots = (SlotMap(options.seeds, slot, tls=tls, hello=auth, reply_timeout=options.reply_wait)
                      if options.cluster else None)
        if options.cluster:
            self.name = f"Redis Cluster (slot {slot}, seeds {options.host}:{options.port}...)"
        elif options.sentinel:
            self.name = f"Redis (Sentinel service {options.sentinel})"
        else:
            self.name = f"Redis {options.host}:{options.port}"

    def alone_check(self) -> AloneCheck | None:
        """Through Sentinels, the check of a write answered by a primary alone (:mod:`.alone`)."""
        if not self.options.sentinel:
            return None
        return AloneCheck(self.options.sentinels, self.options.sentinel, tls=self.tls, auth=self.auth)

    @property
    def named(self) -> bool:
        """Whether the server is named by others (Sentinels, Cluster nodes): one that refuses connections is down,
        and they will name another."""
        return bool(self.options.sentinel or self.options.cluster)

    def silent(self, address: str) -> None:
        """The server at ``host:port`` left a command unanswered for the reply timeout: in a Cluster, it is asked
        last and not connected to as the slot's master until it answers a probe, or the cluster names another
        (:class:`~jobboard_redis.cluster.SlotMap`);
        one server, or the one the Sentinels name, is asked again (there is no other to ask)."""
        if self.slots is not None:
            self.slots.silent(address)

    def close(self) -> None:
        """Stop what runs in the background: a Cluster slot map's probe of a silent master."""
        if self.slots is not None:
            self.slots.close()

    async def primary(self, budget: float) -> tuple[str, int]:
        """The (host, port) to connect to.

        :raises ConnectionLost: no Sentinel or Cluster node named one (``Refused`` if all refused).
        """
        options = self.options
        if self.slots is not None:
            return await self.slots.find_master(budget)
        if options.sentinel:
            return await ask_sentinels(options.sentinels, options.sentinel, budget)
        return options.host, options.port
