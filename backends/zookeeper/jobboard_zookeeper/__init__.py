"""The ``zookeeper://`` job-board backend (needs ``pip install 'jobboard[zookeeper]'``).

aiozk logs a traceback each time a connection drops; this backend states what matters itself
(under ``jobboard_zookeeper``: session state changes at INFO, an unanswered server at WARNING) and
turns every client error into a ``JobBoardError``. So unless the host program set the ``aiozk``
logger's level, importing the backend sets it to CRITICAL: the chatter stays out of its logs.
"""

from __future__ import annotations

import logging

from jobboard_zookeeper.board import ZooKeeperBackend, ZooKeeperBoard
from jobboard_zookeeper.options import ZooKeeperOptions, parse_zookeeper_url

if logging.getLogger("aiozk").level == logging.NOTSET:
    logging.getLogger("aiozk").setLevel(logging.CRITICAL)

__all__ = ["ZooKeeperBackend", "ZooKeeperBoard", "ZooKeeperOptions", "parse_zookeeper_url"]
