"""The ``zookeeper://`` job-board backend (needs ``pip install 'jobboard[zookeeper]'``)."""

from __future__ import annotations

from jobboard_zookeeper.board import ZooKeeperBoard
from jobboard_zookeeper.options import ZooKeeperOptions, parse_zookeeper_url

__all__ = ["ZooKeeperBoard", "ZooKeeperOptions", "parse_zookeeper_url"]
