"""The seeded fault schedule's process faults (SIGKILL, SIGSTOP shorter and longer than the session timeout)
on a sqlite:// board with a producer and three claimer processes, checked against what every process
believed (tests/support/history.py). ``FAULT_SEED=<seed>`` replays a schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fault_schedule import Config, seed_from_env
from tests.support.sqlite_fault_run import run

pytestmark = pytest.mark.timeout(150)

SUITE_DURATION = 10.0


async def test_process_faults_on_a_file_board_keep_every_promise(tmp_path: Path) -> None:
    config = Config(seed=seed_from_env(), duration=SUITE_DURATION, logs=str(tmp_path), mean_gap=0.8)
    print(f"fault schedule seed {config.seed} (replay: FAULT_SEED={config.seed})", flush=True)
    report = await run(config)
    print(report.text())
    assert report.injected.get("sigkill", 0) + report.injected.get("sigstop_long", 0) >= 2, report.text()
    assert report.posts.get("ok", 0) >= 20, report.text()
    assert report.violations == [], report.text()
