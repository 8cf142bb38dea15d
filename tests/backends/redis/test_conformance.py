"""The conformance suite on redis://, against a real server."""

from __future__ import annotations

import uuid

import pytest

from jobboard.board.contract import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_redis import RedisBackend


class TestRedisConformance(JobBoardConformance):
    time_limit = 20.0

    @pytest.fixture
    def board_url(self, redis_url: str) -> str:
        return f"{redis_url}/0/conformance-{uuid.uuid4().hex}?session_timeout=4"

    def next_id(self, job_id: str) -> str:
        return str(int(job_id) + 1)  # the board's sequence, in decimal

    async def inject_malformed(self, board: JobBoard) -> None:
        """A job hash written by another tool: indexed like a job, its posting is not one."""
        assert isinstance(board.backend, RedisBackend)
        prefix = board.backend.options.prefix
        await board.backend.client.command("HSET", f"{prefix}job:999999", "p", b"\x93written by another tool",
                                   "name", "x", "sc", "1", "st", "u", "gen", "0", "att", "0")
        for index in ("all", "ready", "rn:x"):
            await board.backend.client.command("ZADD", f"{prefix}{index}", "1", "999999")


class TestRedisLingerConformance(TestRedisConformance):
    """The same suite with ``?linger=``: every call of the board waits 2 ms to share a write (the contract holds
    whatever the client's write rules)."""

    @pytest.fixture
    def board_url(self, redis_url: str) -> str:
        return f"{redis_url}/0/conformance-{uuid.uuid4().hex}?session_timeout=4&linger=0.002"
