"""One redis:// board spread over a Redis Cluster's masters (``?cluster=1&partitions=K``): the backend
(:mod:`.backend`), where its partitions live (:mod:`.layout`), its claims (:mod:`.claims`) and its links
across partitions (:mod:`.links`). docs/backends/redis.md has the design."""
from __future__ import annotations

from jobboard_redis.spread.backend import SpreadBackend

__all__ = ["SpreadBackend"]
