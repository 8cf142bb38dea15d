"""The ZooKeeper view's sorted id set behaves exactly like a sorted set (no server needed)."""

from __future__ import annotations

import random

import pytest

from jobboard_zookeeper.view import SortedIds


def walk(ids: SortedIds) -> list[str]:
    found, job = [], ids.after("")
    while job is not None:
        found.append(job)
        job = ids.after(job)
    return found


@pytest.mark.parametrize("seed", range(100))
def test_sorted_ids_match_a_sorted_set(seed: int) -> None:
    chooser, ids, reference = random.Random(seed), SortedIds(), set[str]()
    for _ in range(400):
        job = f"{chooser.randrange(5)}-{chooser.randrange(300):013d}"
        if chooser.random() < 0.5:
            assert ids.add(job) == (job not in reference)
            reference.add(job)
        else:
            assert ids.discard(job) == (job in reference)
            reference.discard(job)
        assert walk(ids) == ids.ordered() == sorted(reference) and len(ids) == len(reference)


def test_taking_from_the_head_stays_cheap() -> None:
    ids = SortedIds()
    ids.replace([f"2-{n:013d}" for n in range(50_000)])
    for n in range(30_000):
        assert ids.after("") == f"2-{n:013d}"
        ids.discard(f"2-{n:013d}")
    assert ids.after("") == f"2-{30_000:013d}" and len(ids) == 20_000
