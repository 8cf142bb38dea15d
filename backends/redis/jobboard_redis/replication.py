"""``durability=strict``: a write is answered once a replica has it, where the primary has one.

The replicas to wait for are those of the server the board talks to *now*: learned at every
(re)connection (:mod:`jobboard_redis.learned`), looked at again at most once a second while the
primary has none (a replica that comes back is waited for again), and again whenever a ``WAIT``
comes back short. A ``WAIT`` never outlives the connection's reply timeout: it asks for half of it.
When no replica acknowledged a write in time, the connection is dropped and the write sent again
with its nonce, to whatever server is the primary then: the board's function recognises a write it
already applied, and its retry writes (a short-lived key) so that the next ``WAIT`` covers the first
write too. A primary found without a replica at a (re)connection is written to alone, with one
warning line (its writes are fsynced on it, which is all there is) - except the primary whose
replica just left while a write waited for it: the replica may have been promoted by a failover that
the Sentinels do not name yet, and what the old primary acknowledges then is lost when it is
demoted. That primary is not written to alone for :attr:`Replication.grace` seconds (the board's
reply timeout); the write is retried meanwhile, on the new primary as soon as it is named. Through
Sentinels, a write answered by a primary alone is acknowledged only once that primary is known to be
the primary still (:mod:`jobboard_redis.alone`).

Writes answered together share one ``WAIT`` (it covers every write sent before it on the connection).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from jobboard_redis.alone import AloneCheck
from jobboard_redis.client_wire import ConnectionLost, ServerError, Wire
from jobboard_redis.learned import replicas_of

logger = logging.getLogger(__name__)

RECHECK_EVERY = 1.0
"""Seconds between looks at a primary that had no replica (is one back?)."""


class Replication:
    """The ``WAIT`` after each write of a strict board; see the module docstring."""

    def __init__(self, server: str, *, strict: bool, reply_timeout: float, retry_window: float,
                 alone: AloneCheck | None = None) -> None:
        self.server = server
        self.alone = alone
        """Through Sentinels: the check of a write answered by a primary alone."""
        self.strict = strict
        """Whether writes are followed by ``WAIT`` at all (``durability=strict``)."""
        self.replicas = 0
        """Replicas in sync with the current primary (0: none, or not a strict board)."""
        self.address = ""
        """The current primary's ``host:port``."""
        self.wait_ms = max(1, int(min(reply_timeout, retry_window) * 500))
        self.grace = reply_timeout
        """Seconds a primary whose replica left is not trusted alone (a failover may be under way)."""
        self._left: tuple[str, float] | None = None
        """(primary, until when) after its replica left while a write waited for it."""
        self._round: asyncio.Future[None] | None = None
        self._next_look = 0.0
        self._alone = False
        """Whether the last primary seen had no replica (and that was said)."""

    def learned(self, replicas: int, address: str) -> None:
        """The replicas of the primary ``address`` of a new connection (from its ``ROLE``).

        :raises ConnectionLost: it has none, and its replica left it less than :attr:`grace` ago.
        """
        left = self._left
        if not replicas and left is not None and left[0] == address and time.monotonic() < left[1]:
            raise ConnectionLost(f"{address} lost its replica {self.grace:g} s ago at most: waiting for a "
                                 f"failover to show before writing on it alone")
        self._left = None
        self.replicas, self.address = replicas, address
        self._next_look = time.monotonic() + RECHECK_EVERY
        if replicas and self._alone:
            self._alone = False
            logger.warning("%s (%s) has a replica again: durability=strict writes wait for it", self.server, address)
        elif not replicas and not self._alone:
            self._alone = True
            logger.warning("%s (%s) has no replica: durability=strict writes are fsynced on the primary alone, and "
                           "survive its restart, but not a failover before a replica has caught up, nor the loss of its disk",
                           self.server, address)

    async def unreplicated(self, wire: Wire) -> None:
        """After a write answered by a primary with no replica (as last seen): look again (:meth:`look_again`)
        and, through Sentinels, wait until it is known to be the primary still.

        :raises ConnectionLost: it may not be (the wire is closed: the write is to be sent again with its nonce).
        """
        self.look_again(wire)
        if self.alone is None:
            return
        try:
            await self.alone.confirm(wire.address)
        except ConnectionLost:
            wire.close()
            raise

    def close(self) -> None:
        if self.alone is not None:
            self.alone.close()

    def look_again(self, wire: Wire) -> None:
        """While the primary has no replica: ask its ``ROLE`` (at most once a second, not waited for)."""
        if self.replicas or time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + RECHECK_EVERY
        address = self.address
        wire.send(("ROLE",)).add_done_callback(lambda reply: self._role_answered(reply, address))

    def _role_answered(self, reply: asyncio.Future[Any], address: str) -> None:
        """``ROLE``'s answer, taken only if the board talks to the server it asked still."""
        answered = not reply.cancelled() and reply.exception() is None
        if answered and address == self.address and (replicas := replicas_of(reply.result())):
            self.learned(replicas, address)

    async def after_write(self, wire: Wire) -> None:
        """Wait until a replica has the writes answered so far on ``wire`` (one round shared), or, if the
        primary has none, :meth:`unreplicated`.

        :raises ConnectionLost: no replica acknowledged them: the wire is closed, and the write is to
            be sent again with its nonce (see the module docstring).
        """
        if not self.replicas:
            return await self.unreplicated(wire)
        if self._round is None or self._round.done():
            # at once, not after a linger: the write it follows has waited for one already
            self._round = asyncio.ensure_future(self._wait(wire, wire.send(("WAIT", 1, self.wait_ms), now=True)))
        await asyncio.shield(self._round)

    async def _wait(self, wire: Wire, waited: asyncio.Future[Any]) -> None:
        acknowledged = await waited
        if isinstance(acknowledged, int) and acknowledged >= 1:
            return
        role = await wire.send(("ROLE",))
        wire.close()
        if isinstance(role, list) and role and role[0] == b"master" and not replicas_of(role):
            self._left = (self.address, time.monotonic() + self.grace)
        why = f"WAIT: {acknowledged}" if isinstance(acknowledged, ServerError) else _role_name(role)
        raise ConnectionLost(f"no replica acknowledged a write within {self.wait_ms / 1000:g} s ({why}); "
                             f"sending it again")


def _role_name(role: Any) -> str:
    if isinstance(role, list) and role and isinstance(role[0], bytes):
        return f"{role[0].decode()}, {replicas_of(role)} replicas in sync"
    return str(role)
