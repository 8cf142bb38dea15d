"""One redis:// board spread over a Redis Cluster's masters (``?cluster=1&partitions=K``): the backend
(:mod:`.backend`), where its partitions live (:mod:`.layout`), its posts (:mod:`.posts`), its claims
(:mod:`.claims`), its links across partitions (:mod:`.links`), its idempotency keys (:mod:`.keys`) and its flow
control (:mod:`.flow`). docs/backends/redis.md has the design."""
from __future__ import annotations

from jobboard_redis.spread.backend import SpreadBackend

__all__ = ["SpreadBackend"]
