"""The conformance suite on ``TracedBoard`` over memory://: the wrapper keeps the contract."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (and opentelemetry-sdk) is not installed")

from opentelemetry.sdk.trace import TracerProvider

from jobboard.board.contract import JobBoard
from jobboard.board.registry import open_board
from jobboard.observe.tracing import TracedBoard
from jobboard.testing import BoardMaker, JobBoardConformance
from jobboard_memory import MemoryBackend


class TestTracedConformance(JobBoardConformance):
    @pytest.fixture
    def board_url(self) -> str:
        return f"memory://traced-conformance-{uuid.uuid4().hex}"

    @pytest.fixture
    def make_board(self) -> BoardMaker:
        provider = TracerProvider()  # spans made and dropped: no exporter
        return lambda url: TracedBoard(open_board(url), tracer_provider=provider)

    def next_id(self, job_id: str) -> str:
        return f"job-{int(job_id.removeprefix('job-')) + 1:010d}"

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board, TracedBoard) and isinstance(board.inner.backend, MemoryBackend)
        board.inner.backend.inject_malformed(b"\x93not a posting")
