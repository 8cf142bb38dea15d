"""WorkerConfig refuses at construction what would make a worker fail later: a tryout's prefetch=1.5 was taken,
and every claim then failed ('count must be a whole number') and was retried forever, no job ever run."""

from __future__ import annotations

from typing import Any

import pytest

from jobboard.worker.config import WorkerConfig


@pytest.mark.parametrize("field", ["concurrency", "prefetch"])
@pytest.mark.parametrize("value", [1.5, "2", True, None])
def test_a_count_that_is_not_a_whole_number_is_refused(field: str, value: Any) -> None:
    with pytest.raises(TypeError, match=f"{field} must be a whole number"):
        WorkerConfig(**{field: value})


def test_counts_below_their_least_are_refused_and_whole_ones_taken() -> None:
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        WorkerConfig(concurrency=0)
    with pytest.raises(ValueError, match="prefetch must be 0 or more"):
        WorkerConfig(prefetch=-1)
    config = WorkerConfig(concurrency=3, prefetch=0)
    assert (config.concurrency, config.prefetch) == (3, 0)
