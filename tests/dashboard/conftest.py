"""The dashboard tests' board: a fresh memory:// board per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.registry import open_board


@pytest.fixture
async def board() -> AsyncIterator[JobBoard]:
    async with open_board(f"memory://dash-{uuid.uuid4().hex}") as opened:
        yield opened
