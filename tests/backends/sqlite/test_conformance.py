"""The conformance suite, unchanged, on sqlite:// (a fresh file per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobboard.board import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_sqlite import SqliteBackend


class TestSqliteConformance(JobBoardConformance):
    @pytest.fixture
    def board_url(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite://{tmp_path}/jobs.db?board=conformance"

    def next_id(self, job_id: str) -> str:
        return f"job-{int(job_id.removeprefix('job-')) + 1:010d}"

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board.backend, SqliteBackend)
        board.backend.inject_malformed(b"\x93not a posting")
