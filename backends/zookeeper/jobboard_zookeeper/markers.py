"""Write markers: how a board learns, after a lost reply, whether its own write was applied.

Every post and settle multi also creates ``marks/<board>-<n>``, a node that no
other write ever creates. A multi applies entirely or not at all, so after a
lost reply the marker exists exactly when the write was applied, whatever other
boards did to the job meanwhile and whether or not this board's session
survived. Reading it back needs no guess about "the lock is not ours".

Markers are short-lived: once a write's outcome is known its marker is queued and
deleted in batches (one multi per :data:`DELETE_BATCH` markers, or after
:data:`FLUSH_DELAY` seconds), so a busy board pays one extra create per write and
a fraction of a request per write for the deletions.

Markers of a board that died before deleting them are collected by any board:
a marker seen in two collection passes at least :data:`MARKER_GRACE` seconds apart
is deleted. So a marker lives at least ``MARKER_GRACE`` after its write; a board
trusts the absence of its marker only within that time of sending the write,
and past it raises :class:`~jobboard.errors.UnknownOutcome` instead of guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from dataclasses import dataclass

from jobboard.errors import BackendUnavailable, UnknownOutcome
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.ops import Create, Delete, OutcomeUnknown
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

DELETE_BATCH = 128
FLUSH_DELAY = 0.2
MARKER_GRACE = 600.0
"""Seconds a marker is kept at least; also how long a lost reply can be resolved."""


@dataclass(frozen=True, slots=True)
class Marker:
    """One write's marker: its path and when (loop time) the write was first sent."""

    path: str
    sent_at: float

    def create(self) -> Create:
        return Create(self.path)


class Markers:
    """Makes, reads back and deletes this board's write markers; collects dead boards' ones."""

    def __init__(self, zk: ZooKeeper, paths: Paths) -> None:
        self._zk, self._paths = zk, paths
        self._prefix = uuid.uuid4().hex[:16]
        self._counter = itertools.count()
        self._doomed: list[str] = []
        self._flusher: asyncio.Task[None] | None = None
        self._seen_orphans: tuple[float, set[str]] | None = None
        self._closed = False

    def new(self) -> Marker:
        """A fresh marker for one write (include ``marker.create()`` in its multi)."""
        name = f"{self._prefix}-{next(self._counter):010d}"
        return Marker(self._paths.mark(name), asyncio.get_running_loop().time())

    def done(self, marker: Marker) -> None:
        """The write applied and its outcome is known: the marker may go."""
        self._doomed.append(marker.path)
        if self._closed:
            return  # a write that finished while the board closed: the collector takes its marker
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def applied(self, marker: Marker) -> bool:
        """Whether the write that carried ``marker`` was applied (after its reply was lost).

        :raises BackendUnavailable: the server could not be asked (ask again later).
        :raises UnknownOutcome: too long since the write was sent to trust the answer.
        """
        await self._zk.sync(marker.path)  # the read sees every write the leader applied before it
        exists = await self._zk.exists(marker.path) is not None
        if exists:
            self.done(marker)
            return True
        if asyncio.get_running_loop().time() - marker.sent_at > MARKER_GRACE:
            raise UnknownOutcome(
                f"a write's reply was lost more than {MARKER_GRACE:.0f}s ago: whether it was applied "
                "can no longer be told")
        return False

    async def close(self) -> None:
        """Delete what is queued (best effort; a leftover is collected later by any board)."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
        with contextlib.suppress(BackendUnavailable, TimeoutError):
            await asyncio.wait_for(self._flush(), 1.0)

    async def _flush_soon(self) -> None:
        while self._doomed:
            if len(self._doomed) < DELETE_BATCH:
                await asyncio.sleep(FLUSH_DELAY)
            try:
                await self._flush()
            except BackendUnavailable:
                await asyncio.sleep(1.0)  # try again once connected

    async def _flush(self) -> None:
        while self._doomed:
            batch, self._doomed = self._doomed[:DELETE_BATCH], self._doomed[DELETE_BATCH:]
            try:
                await self.delete(batch)
            except BaseException:
                self._doomed[:0] = batch
                raise

    async def delete(self, paths: list[str]) -> None:
        """Delete markers in one multi; one by one where some are gone already."""
        try:
            result = await self._zk.multi([Delete(path) for path in paths])
            if result.ok:
                return
        except OutcomeUnknown:
            pass
        for path in paths:
            outcome = await self._zk.multi([Delete(path)], retry_safe=True)
            failure = outcome.failure()
            if failure is not None and failure[1] != "NoNode":
                logger.warning("could not delete write marker %s: %s", path, failure[1])

    async def collect(self) -> int:
        """One collection pass: delete markers seen in a pass at least ``MARKER_GRACE`` ago.

        Returns how many were deleted. Markers of live boards are deleted by them
        within a second, so what stays that long belongs to a board that died.
        """
        listing = await self._zk.children(self._paths.dir("marks"))
        names = set(listing[0]) if listing else set()
        now = asyncio.get_running_loop().time()
        if self._seen_orphans is None or now - self._seen_orphans[0] < MARKER_GRACE:
            if self._seen_orphans is None:
                self._seen_orphans = (now, names)
            return 0
        old = sorted(self._seen_orphans[1] & names)
        self._seen_orphans = (now, names - set(old))
        for start in range(0, len(old), DELETE_BATCH):
            await self.delete([self._paths.mark(name) for name in old[start:start + DELETE_BATCH]])
        if old:
            logger.info("collected %d write markers left by boards that died", len(old))
        return len(old)
