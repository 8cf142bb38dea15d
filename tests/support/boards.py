"""A fresh, empty board on one of the in-tree backends, for tests parametrized by backend."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.events import EventKind, EventStream
from jobboard.board.registry import open_board
from jobboard.job import Job

BACKENDS = ("memory", "zookeeper", "redis")


def fresh_board_url(request: pytest.FixtureRequest, prefix: str) -> str:
    """A new board named ``prefix-<random>`` on ``request.param`` (a name in :data:`BACKENDS`);
    the ZooKeeper and Redis servers come from the ``zk_hosts`` and ``redis_url`` fixtures."""
    name = f"{prefix}-{uuid.uuid4().hex}"
    if request.param == "memory":
        return f"memory://{name}"
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}/0/{name}?session_timeout=4"
    return f"zookeeper://{request.getfixturevalue('zk_hosts')}/{prefix}/{name}?session_timeout=4"


async def claimed(events: EventStream, job_id: str) -> None:
    """Until ``events`` shows ``job_id`` claimed (by any board): then this board's view knows of the lock."""
    async for event in events:
        if event.kind is EventKind.CLAIMED and event.job_id == job_id:
            return


async def released_after_kill(board: JobBoard, job: Job, owner: asyncio.subprocess.Process) -> float:
    """SIGKILL ``owner`` (the process holding ``job``'s claim); the seconds until ``board.wait()`` offers the
    job again. A survivor then claims it (its second attempt, its details intact) and consumes it."""
    owner.kill()
    await owner.wait()
    killed_at = time.monotonic()
    ready = await board.wait()
    released = time.monotonic() - killed_at
    assert [j.id for j in ready] == [job.id]
    claim = await board.claim(job, "survivor")
    assert claim.attempt == 2 and dict(claim.job.details) == dict(job.details)
    await board.consume(claim)
    return released


async def killed_owner_released(url: str, owner_script: str) -> float:
    """Post a job on ``url``; ``python -c owner_script url`` claims it as ``doomed`` and prints
    ``claimed <id>``; then :func:`released_after_kill`'s seconds (60 s at most in all)."""
    with anyio.fail_after(60):
        async with open_board(url) as board:
            job = await board.post("a", {"payload": 1})
            pipe = asyncio.subprocess.PIPE
            child = await asyncio.create_subprocess_exec(sys.executable, "-c", owner_script, url,
                                                         stdin=pipe, stdout=pipe)
            assert child.stdout is not None
            assert (await child.stdout.readline()).decode().split() == ["claimed", job.id]
            assert await board.owner(job) == "doomed"
            return await released_after_kill(board, job, child)
