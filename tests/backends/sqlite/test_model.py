"""The model-based test of the contract (jobboard.testing.stateful) on sqlite://, a fresh file per example."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest

from jobboard.testing.stateful import run_model_test

pytestmark = pytest.mark.timeout(240)


def test_sqlite_board_follows_the_model(tmp_path: Path) -> None:
    run_model_test(lambda: f"sqlite://{tmp_path}/model-{uuid.uuid4().hex}.db?board=model", examples=40)


def test_two_boards_in_one_file_follow_the_model() -> None:
    """Two boards share one file (and its sessions' directory): each keeps its own jobs."""
    with tempfile.TemporaryDirectory() as directory:
        run_model_test(lambda: f"sqlite://{directory}/shared.db?board=b-{uuid.uuid4().hex}", examples=15)
