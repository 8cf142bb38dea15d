"""The model-based test of the contract (jobboard.testing.stateful) on postgresql://, against a real server.

A fixed seed and bounded examples in the suite; ``JOBBOARD_MODEL_EXAMPLES`` and the other variables of
tests/testing/test_model_based.py make a longer run by hand.
"""

from __future__ import annotations

import os
import uuid

import pytest

from jobboard.testing.stateful import run_model_test
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(0 if "JOBBOARD_MODEL_EXAMPLES" in os.environ else 240)


def test_postgresql_board_follows_the_model(postgresql_url: str) -> None:  # noqa: F811
    run_model_test(lambda: f"{postgresql_url}?board=model-{uuid.uuid4().hex}", examples=20)
