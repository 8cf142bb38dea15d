"""Review of redis:// rate limits' parking (flow.lua): a job the rate parks must come back once a permit is free,
even while every job the rate let through is still running (no claim ends to trigger a refill). It did not:
the refill left the jobs beyond the window's permits without a timer (fixed by 25ac43c)."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import open_board
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("spread", ["", "&partitions=3"])
async def test_a_rate_parked_job_comes_back_while_the_granted_ones_still_run(
        cluster_seeds: str, spread: str) -> None:  # noqa: F811
    """Rate 2 per 0.3 s, five jobs, nothing settled: two claims a window; the fifth job comes in the third."""
    url = f"redis://{cluster_seeds}/0/refill-{uuid.uuid4().hex}?cluster=1&session_timeout=4{spread}"
    with anyio.fail_after(30):
        async with open_board(url) as board:
            period = 0.3
            await board.set_limit("api", rate=(2, period))
            jobs = [await board.post("call", group="api") for _ in range(5)]
            running = [claim for _ in range(3) if (claim := await board.claim_next("w")) is not None]
            assert len(running) == 2  # window 1: two grants, the other three parked
            await anyio.sleep(period + 0.1)
            for _ in range(20):  # window 2: the refill puts two back
                if (claim := await board.claim_next("w")) is not None:
                    running.append(claim)
                if len(running) == 4:
                    break
                await anyio.sleep(0.05)
            assert sorted(c.job.id for c in running) == sorted(job.id for job in jobs[:4])
            await anyio.sleep(period + 0.1)
            last = None
            for _ in range(30):  # 3 s: ten windows with a permit free
                if (last := await board.claim_next("w")) is not None:
                    break
                await anyio.sleep(0.1)
            assert last is not None and last.job.id == jobs[4].id, "3 s of free permits, the fifth job still parked"
