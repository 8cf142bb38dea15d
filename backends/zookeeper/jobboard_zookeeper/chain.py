"""The version chain: one request per post while this board is the only one posting.

A job's sequence is the new data version of the counter node. The two-request
post first bumps the counter (``set_data`` at any version) and then creates the
job. A *chained* post does both in one multi: ``set_data(counter, version=v)``
first, so the multi applies only if the counter is at ``v``, and its job is
``v + 1``. The counter passes from ``v`` to ``v + 1`` once, so whoever makes that
step (a chained multi or a plain bump) owns sequence ``v + 1``: ids stay unique
whatever this bookkeeping believes; a wrong belief only costs a failed multi.

The :class:`Chain` holds the version this board expects the counter to have
when its next request reaches the server. Requests on one session are applied in
the order they are sent, so posts sent one after another take ``v``, ``v + 1``,
... and all apply while no other writer bumps the counter. When one fails
(another board bumped it, a key or a lost reply made the multi fail), every
chained post sent after it fails too; each falls back to the two-request post.
The chain is re-established from the reply of this board's last bump, and after
a conflict with another writer it stays unused for a cool-down (doubling up to
:data:`MAX_COOLDOWN` while conflicts repeat), so boards posting at the same time
pay about what the two-request post costs, not more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from jobboard_zookeeper.layout import EPOCH_SIZE
from jobboard_zookeeper.ops import Op, SetData

MIN_COOLDOWN = 0.01
MAX_COOLDOWN = 1.0
CALM = 256
"""Chained posts in a row that reset the cool-down to :data:`MIN_COOLDOWN`."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A chained write's place: the counter version it expects and the ``count`` sequences it
    gets (a chunk of ``post_many`` moves the counter ``count`` times in its multi)."""

    epoch: int
    expected: int
    generation: int
    count: int = 1

    @property
    def sequence(self) -> int:
        return self.epoch * EPOCH_SIZE + self.expected + 1

    @property
    def sequences(self) -> list[int]:
        return list(range(self.sequence, self.sequence + self.count))

    def bumps(self, counter: str) -> list[Op]:
        """The ``set_data`` operations that move the counter, first in the write's multi."""
        return [SetData(counter, b"", self.expected + step) for step in range(self.count)]


class Chain:
    """What this board believes the counter's version is (see the module docstring)."""

    def __init__(self) -> None:
        self._epoch = 0
        self._next: int | None = None
        """The version the counter has when this board's next request reaches it (None: unknown)."""
        self._generation = 0
        self._bumps = 0
        """This board's bumps sent and not answered yet."""
        self._cooldown = MIN_COOLDOWN
        self._idle_until = 0.0
        self._calm = 0
        self.chained = 0
        """Chained posts that applied (for tests and benchmarks)."""
        self.conflicts = 0
        """Chained posts that found the counter moved by another writer."""

    def take(self, count: int = 1) -> Turn | None:
        """The next chained write's turn, or ``None``: allocate with a bump first."""
        version = self._next
        if version is None or self._bumps or version + count >= EPOCH_SIZE:
            return None
        if self._idle_until and asyncio.get_running_loop().time() < self._idle_until:
            return None
        self._next = version + count
        return Turn(self._epoch, version, self._generation, count)

    def hit(self, turn: Turn) -> None:
        """A chained write applied."""
        self.chained += turn.count
        if turn.generation == self._generation:
            self._calm += 1
            if self._calm >= CALM:
                self._cooldown, self._calm = MIN_COOLDOWN, 0

    def missed(self, turn: Turn, *, contended: bool) -> None:
        """A chained post did not apply (``contended``: the counter was not at its version)."""
        self.conflicts += contended
        if turn.generation != self._generation:
            return  # the chain was dropped already
        self._drop()
        if contended:
            self._idle_until = asyncio.get_running_loop().time() + self._cooldown
            self._cooldown = min(2 * self._cooldown, MAX_COOLDOWN)

    def bumping(self) -> None:
        """This board is about to bump the counter: chained posts wait for the bump's reply."""
        self._bumps += 1
        self._drop()

    def bumped(self, epoch: int, version: int | None) -> None:
        """A bump's reply: the counter's version after it (``None``: no reply)."""
        self._bumps -= 1
        if self._bumps == 0 and version is not None and self._next is None:
            self._epoch, self._next = epoch, version  # every earlier request of ours is before it

    def start(self, epoch: int, version: int) -> None:
        """The counter's version as read when the board opens."""
        self._drop()
        self._epoch, self._next = epoch, version

    def _drop(self) -> None:
        self._next = None
        self._generation += 1
        self._calm = 0
