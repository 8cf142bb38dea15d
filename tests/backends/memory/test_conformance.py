"""The conformance suite on memory://."""

from __future__ import annotations

import uuid

import pytest

from jobboard.board.contract import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_memory import MemoryBackend


class TestMemoryConformance(JobBoardConformance):
    @pytest.fixture
    def board_url(self) -> str:
        return f"memory://conformance-{uuid.uuid4().hex}"

    def next_id(self, job_id: str) -> str:
        return f"job-{int(job_id.removeprefix('job-')) + 1:010d}"

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board.backend, MemoryBackend)
        board.backend.inject_malformed(b"\x93not a posting")
