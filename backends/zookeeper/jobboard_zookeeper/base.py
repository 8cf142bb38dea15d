"""What the parts of the ZooKeeper board (:mod:`.keep`, :mod:`.batching`) need from the board itself."""

from __future__ import annotations

import abc

from jobboard.backend import Backend
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.linked import Stored
from jobboard_zookeeper.view import BoardView
from jobboard_zookeeper.zk import ZooKeeper


class ZooKeeperBase(Backend):
    """The session, layout, live view and job reads that :class:`~jobboard_zookeeper.board.ZooKeeperBackend`
    provides to the classes it is made of."""

    _paths: Paths
    view: BoardView

    @property
    @abc.abstractmethod
    def zk(self) -> ZooKeeper:
        """The open session. :raises BoardClosed: the board is not open."""

    @abc.abstractmethod
    async def _stored(self, job: str, *, claimable_only: bool = False) -> Stored | None:
        """The job's node as stored (``None`` if it is gone or malformed)."""
