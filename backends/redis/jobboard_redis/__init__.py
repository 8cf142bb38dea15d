"""``redis://`` and ``rediss://``: a job board on Redis (>= 7.0), through its own client over hiredis."""

from __future__ import annotations

from jobboard.board.contract import JobBoard
from jobboard_redis.board import RedisBackend
from jobboard_redis.spread import SpreadBackend

RedisBackend.spread = SpreadBackend


class RedisBoard(JobBoard):
    """A :class:`~jobboard.board.contract.JobBoard` over a :class:`RedisBackend`: ``RedisBoard(url)``."""

    backend: RedisBackend

    def __init__(self, url: str) -> None:
        super().__init__(RedisBackend(url))


__all__ = ["RedisBackend", "RedisBoard", "SpreadBackend"]
