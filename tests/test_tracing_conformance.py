"""The conformance suite on ``TracedBoard`` over memory://: the wrapper keeps the contract."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (and opentelemetry-sdk) is not installed")

from opentelemetry.sdk.trace import TracerProvider

from jobboard.board import JobBoard
from jobboard.registry import open_board
from jobboard.testing import JobBoardConformance
from jobboard.testing._base import BoardOpener
from jobboard.tracing import TracedBoard
from jobboard_memory import MemoryBoard


class TestTracedConformance(JobBoardConformance):
    @pytest.fixture
    def board_url(self) -> str:
        return f"memory://traced-conformance-{uuid.uuid4().hex}"

    @pytest.fixture
    async def open_boards(self, board_url: str) -> AsyncIterator[BoardOpener]:
        provider = TracerProvider()  # spans made and dropped: no exporter

        async with AsyncExitStack() as stack:
            async def opener() -> JobBoard:
                inner = await stack.enter_async_context(open_board(board_url))
                return await stack.enter_async_context(TracedBoard(inner, tracer_provider=provider))

            yield opener

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board, TracedBoard) and isinstance(board.inner, MemoryBoard)
        board.inner.inject_malformed(b"\x93not a posting")
