"""A three-server ensemble on loopback: 1000 jobs through several boards while the leader dies."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack

import anyio
import pytest

from jobboard import BackendUnavailable, ClaimLost, JobBoard, open_board
from tests.support.zkserver import ZooKeeperEnsemble

pytestmark = pytest.mark.timeout(240)

JOBS = 1000
BOARDS = 4
CLAIMERS_PER_BOARD = 4
KILL_AFTER = 300


async def test_leader_killed_mid_run_loses_nothing_and_doubles_nothing() -> None:
    with ZooKeeperEnsemble(3) as ensemble:
        url = f"zookeeper://{ensemble.hosts}/ensemble/{uuid.uuid4().hex}?session_timeout=10"
        consumed: Counter[str] = Counter()
        retries = Counter[str]()
        with anyio.fail_after(180):
            async with open_board(url) as producer:
                posted = {(await producer.post("n", {"i": i})).id for i in range(JOBS)}

            async def claimer(board: JobBoard, owner: str) -> None:
                while len(consumed) < JOBS:
                    try:
                        claim = await board.claim_next(owner)
                        if claim is None:
                            await anyio.sleep(0.05)
                            continue
                        await board.consume(claim, owner)
                        consumed[claim.job.id] += 1
                    except BackendUnavailable:
                        retries["backend unavailable"] += 1
                        await anyio.sleep(0.2)
                    except ClaimLost:
                        retries["claim lost"] += 1

            async def killer() -> None:
                while len(consumed) < KILL_AFTER:
                    await anyio.sleep(0.01)
                leader = ensemble.leader_index()
                killed_at = time.monotonic()
                await anyio.to_thread.run_sync(ensemble.kill, leader)
                before = len(consumed)
                while len(consumed) == before:
                    await anyio.sleep(0.01)
                print(f"leader {leader} killed at {before} consumed; progress again after "
                      f"{time.monotonic() - killed_at:.2f}s")

            started = time.monotonic()
            async with AsyncExitStack() as boards, anyio.create_task_group() as group:
                group.start_soon(killer)
                for index in range(BOARDS):
                    board = await boards.enter_async_context(open_board(url))
                    for slot in range(CLAIMERS_PER_BOARD):
                        group.start_soon(claimer, board, f"b{index}-c{slot}")
            elapsed = time.monotonic() - started
            async with open_board(url) as checker:
                left = await checker.job_count()
        doubled = [job for job, count in consumed.items() if count > 1]
        print(f"{JOBS} jobs in {elapsed:.1f}s through a leader kill: lost {len(posted - set(consumed))}, "
              f"consumed twice {len(doubled)}, left {left}, retries {dict(retries)}")
        assert set(consumed) == posted
        assert doubled == []
        assert left == 0
