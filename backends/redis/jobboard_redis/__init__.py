"""``redis://`` and ``rediss://``: a job board on Redis (>= 7.0), through its own client over hiredis."""

from __future__ import annotations

from jobboard_redis.board import RedisBackend, RedisBoard

__all__ = ["RedisBackend", "RedisBoard"]
