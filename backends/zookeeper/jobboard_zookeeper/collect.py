"""Collection of what boards leave behind: dead boards' write markers and expired keys.

One board at a time collects: the one holding the ephemeral ``<root>/collector``
node (taken by whoever asks first; it passes on when its session ends). Every
board asks once per :data:`COLLECT_INTERVAL` (with jitter).
"""

from __future__ import annotations

import asyncio
import logging
import random

from jobboard.errors import JobBoardError
from jobboard_zookeeper.keys import collect_keys
from jobboard_zookeeper.layout import Paths
from jobboard_zookeeper.markers import MARKER_GRACE, Markers
from jobboard_zookeeper.ops import Create
from jobboard_zookeeper.zk import ZooKeeper

logger = logging.getLogger(__name__)

COLLECT_INTERVAL = MARKER_GRACE / 2


async def collect_forever(zk: ZooKeeper, paths: Paths, markers: Markers, key_retention: float) -> None:
    """Collect now and then while this board is open (cancelled when it closes)."""
    collector = f"{paths.root}/collector"
    while True:
        try:
            if await is_collector(zk, collector):
                await markers.collect()
                server_now = (await zk.bump(collector)).mtime
                removed = await collect_keys(zk, paths, key_retention, server_now)
                if removed:
                    logger.info("collected %d expired idempotency keys", removed)
        except JobBoardError as error:
            logger.debug("collection pass skipped: %s", error)
        await asyncio.sleep(COLLECT_INTERVAL * random.uniform(0.9, 1.1))


async def is_collector(zk: ZooKeeper, path: str) -> bool:
    """Take the collector node if nobody holds it; True if this session holds it."""
    result = await zk.multi([Create(path, ephemeral=True)], retry_safe=True)
    if result.ok:
        return True
    stat = await zk.exists(path)
    return stat is not None and stat.ephemeral_owner == zk.session_id
