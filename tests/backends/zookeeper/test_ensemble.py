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


class Run:
    """Claimers on several boards, counting every successful consume per job."""

    def __init__(self, ensemble: ZooKeeperEnsemble, url: str) -> None:
        self.ensemble, self.url = ensemble, url
        self.consumed: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.reached_kill_point = anyio.Event()
        self.progressed = anyio.Event()
        self.consumed_at_kill: int | None = None

    async def claimer(self, board: JobBoard, owner: str) -> None:
        while len(self.consumed) < JOBS:
            try:
                claim = await board.claim_next(owner)
                if claim is None:
                    with anyio.move_on_after(0.5):
                        await board.wait()
                    continue
                await board.consume(claim, owner)
                self.count(claim.job.id)
            except BackendUnavailable:
                self.retries["backend unavailable"] += 1
                await anyio.sleep(0.2)
            except ClaimLost:
                self.retries["claim lost"] += 1

    def count(self, job_id: str) -> None:
        self.consumed[job_id] += 1
        if len(self.consumed) >= KILL_AFTER:
            self.reached_kill_point.set()
        if self.consumed_at_kill is not None and len(self.consumed) > self.consumed_at_kill:
            self.progressed.set()

    async def kill_the_leader(self) -> None:
        await self.reached_kill_point.wait()
        leader = self.ensemble.leader_index()
        await anyio.to_thread.run_sync(self.ensemble.kill, leader)
        killed_at, self.consumed_at_kill = time.monotonic(), len(self.consumed)
        await self.progressed.wait()
        print(f"leader {leader} dead (SIGKILL) at {self.consumed_at_kill} consumed; the next consume came "
              f"{time.monotonic() - killed_at:.2f}s later")

    async def run(self) -> float:
        started = time.monotonic()
        async with AsyncExitStack() as boards, anyio.create_task_group() as group:
            group.start_soon(self.kill_the_leader)
            for index in range(BOARDS):
                board = await boards.enter_async_context(open_board(self.url))
                for slot in range(CLAIMERS_PER_BOARD):
                    group.start_soon(self.claimer, board, f"b{index}-c{slot}")
        return time.monotonic() - started


async def test_leader_killed_mid_run_loses_nothing_and_doubles_nothing() -> None:
    with ZooKeeperEnsemble(3) as ensemble:
        url = f"zookeeper://{ensemble.hosts}/ensemble/{uuid.uuid4().hex}?session_timeout=10"
        with anyio.fail_after(180):
            async with open_board(url) as producer:
                posted = {(await producer.post("n", {"i": i})).id for i in range(JOBS)}
            run = Run(ensemble, url)
            elapsed = await run.run()
            async with open_board(url) as checker:
                left = await checker.job_count()
        doubled = [job for job, count in run.consumed.items() if count > 1]
        print(f"{JOBS} jobs in {elapsed:.1f}s through a leader kill: lost {len(posted - set(run.consumed))}, "
              f"consumed twice {len(doubled)}, left {left}, retries {dict(run.retries)}")
        assert set(run.consumed) == posted
        assert doubled == []
        assert left == 0
