"""The model-based test of the contract (jobboard.testing.stateful) on memory://, zookeeper:// and redis://.

In the suite: a fixed seed, bounded examples, no shrinking. A longer run by hand::

    JOBBOARD_MODEL_EXAMPLES=500 .venv/bin/python -m tests.support.zkserver run -- \\
        .venv/bin/python -m tests.support.redisserver run -- .venv/bin/python -m pytest tests/testing/test_model_based.py -s

draws a random seed and prints it (and has no time limit); ``JOBBOARD_MODEL_SEED=<seed>`` replays a run,
``JOBBOARD_MODEL_SHRINK=1`` shrinks a failure to a minimal sequence of steps,
``JOBBOARD_MODEL_STEPS`` sets the steps per example (default 30). Each run fails, too, if its successful
claims or settles were fewer than 2 % of its steps (``run_model_test``'s ``floor``).
"""

from __future__ import annotations

import os
import uuid

import pytest

from jobboard.testing.stateful import run_model_test

pytestmark = pytest.mark.timeout(0 if "JOBBOARD_MODEL_EXAMPLES" in os.environ else 240)


def test_memory_board_follows_the_model() -> None:
    run_model_test(lambda: f"memory://model-{uuid.uuid4().hex}", examples=60)


def test_zookeeper_board_follows_the_model(zk_hosts: str) -> None:
    run_model_test(
        lambda: f"zookeeper://{zk_hosts}/model/{uuid.uuid4().hex}?session_timeout=4", examples=40,
    )


def test_partitioned_zookeeper_board_follows_the_model(zk_hosts: str) -> None:
    run_model_test(
        lambda: f"zookeeper://{zk_hosts}/model/{uuid.uuid4().hex}?session_timeout=4&partitions=4", examples=15,
        # Across members, claim_next takes the best job of its own partitions first (docs/backends/zookeeper.md,
        # "Order, precisely"): any claimable job is right, not only the board's best.
        claim_next_best_first=False,
    )


def test_redis_board_follows_the_model(redis_url: str) -> None:
    run_model_test(lambda: f"{redis_url}/0/model-{uuid.uuid4().hex}?session_timeout=4", examples=60)
