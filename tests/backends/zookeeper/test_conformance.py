"""The conformance suite on zookeeper://, against a real server."""

from __future__ import annotations

import uuid

import pytest

from jobboard.board.contract import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_zookeeper import ZooKeeperBackend
from jobboard_zookeeper.ops import Create


class TestZooKeeperConformance(JobBoardConformance):
    time_limit = 20.0

    @pytest.fixture
    def board_url(self, zk_hosts: str) -> str:
        return f"zookeeper://{zk_hosts}/conformance/{uuid.uuid4().hex}?session_timeout=4"

    def next_id(self, job_id: str) -> str:
        rank, _, sequence = job_id.partition("-")  # <rank>-<sequence>: see jobboard_zookeeper.layout
        return f"{rank}-{int(sequence) + 1:013d}"

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board.backend, ZooKeeperBackend)
        path = f"{board.backend.options.root}/jobs/2-0000000000000"
        result = await board.backend.zk.multi([Create(path, b"\x93written by another tool")])
        assert result.ok


class TestPartitionedZooKeeperConformance(TestZooKeeperConformance):
    """The same suite on a board whose jobs are split into 4 partitions (see jobboard_zookeeper.partitions)."""

    @pytest.fixture
    def board_url(self, zk_hosts: str) -> str:
        return f"zookeeper://{zk_hosts}/conformance/{uuid.uuid4().hex}?session_timeout=4&partitions=4"

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board.backend, ZooKeeperBackend)
        path = board.backend._paths.job("2-0000000000000")
        result = await board.backend.zk.multi([Create(path, b"\x93written by another tool")])
        assert result.ok
