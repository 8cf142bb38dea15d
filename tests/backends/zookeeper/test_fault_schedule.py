"""A seeded fault schedule against a 3-server ensemble, checked against what every client believed.

The seed is printed; ``FAULT_SEED=<seed>`` replays the same schedule (timing still varies).
Longer runs: ``scripts/soak``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fault_run import run
from tests.support.fault_schedule import Config, schedule, seed_from_env

pytestmark = pytest.mark.timeout(150)

SUITE_DURATION = 25.0
"""Seconds of faults in the suite (the whole test, ensemble included, takes under a minute)."""


def test_a_seed_gives_one_schedule() -> None:
    config = Config(seed=7, duration=60)
    assert schedule(config) == schedule(Config(seed=7, duration=60))
    assert schedule(config) != schedule(Config(seed=8, duration=60))
    kinds = {fault.kind for fault in schedule(config)}
    assert {"lose_reply", "leader_kill"} <= kinds
    assert seed_from_env({"FAULT_SEED": "123"}) == 123


async def test_a_fault_schedule_keeps_every_promise(tmp_path: Path) -> None:
    config = Config(seed=seed_from_env(), duration=SUITE_DURATION, logs=str(tmp_path))
    print(f"fault schedule seed {config.seed} (replay: FAULT_SEED={config.seed})", flush=True)
    report = await run(config)
    print(report.text())
    assert report.proxy.get("lost_reply", 0) >= 1, "no reply was lost: the schedule tested little"
    assert report.violations == [], report.text()
