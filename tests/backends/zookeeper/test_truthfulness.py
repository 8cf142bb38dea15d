"""Issue 9 reproducers: zookeeper:// must never report a settle it did not have, nor post twice.

Each failed on the product before issue 9's fixes (write markers), with real processes and
a real fault proxy; tests/backends/zookeeper/test_truth.py has in-process versions of the same cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from jobboard import JobNotFound, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import AlreadyClaimed
from jobboard.job import Claim, Job
from tests.support.faultproxy import FaultLink

pytestmark = pytest.mark.timeout(90)

SESSION_TIMEOUT = 2.0

STALE_OWNER = """
import asyncio, sys
from jobboard import JobBoardError, open_board
async def main():
    async with open_board(sys.argv[1]) as board:
        claim = await board.claim_next("stale")
        print("claimed", claim.job.id, claim.generation, flush=True)
        sys.stdin.readline()  # the loop is blocked here: it settles first thing after SIGCONT
        try:
            if sys.argv[2] == "consume":
                await board.consume(claim, "stale result")
            else:
                await board.abandon(claim, retry_after=30)
            print("returned", flush=True)
        except JobBoardError as error:
            print(type(error).__name__, flush=True)
asyncio.run(main())
"""


def board_url(hosts: str, session_timeout: float = SESSION_TIMEOUT) -> str:
    return f"zookeeper://{hosts}/truth/{uuid.uuid4().hex}?session_timeout={session_timeout}"


@pytest.fixture
async def link(zk_hosts: str) -> AsyncIterator[FaultLink]:
    host, port = zk_hosts.rsplit(":", 1)
    async with FaultLink([(host, int(port))]) as running:
        yield running


async def claim_once_expired(rival: JobBoard, job: Job) -> Claim:
    """The rival's claim of ``job`` once the frozen owner's lock expired. The rival's view may hear of that lock
    late, or (on a loaded machine, the owner's session gone within 2 s) never: until the lock is gone,
    wait() may offer the job and the claim is refused (AlreadyClaimed): wait and try again."""
    while True:
        if job.id in [each.id for each in await rival.wait()]:
            with contextlib.suppress(AlreadyClaimed):
                return await rival.claim(job, "rival")
            await anyio.sleep(0.05)


@pytest.mark.parametrize("settle", ["consume", "abandon"])
async def test_a_settle_after_sigstop_past_the_session_timeout_raises_claim_lost(
        zk_hosts: str, settle: str) -> None:
    url = board_url(zk_hosts)
    with anyio.fail_after(60):
        async with open_board(url) as rival:
            job = await rival.post("a", {"tag": "stale"})
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", STALE_OWNER, url, settle,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
            assert child.stdin is not None and child.stdout is not None
            try:
                assert (await child.stdout.readline()).decode().split() == ["claimed", job.id, "1"]
                os.kill(child.pid, signal.SIGSTOP)  # frozen past its session timeout
                taken = await claim_once_expired(rival, job)
                assert taken.generation == 2
                if settle == "consume":
                    await rival.consume(taken, "rival result")
                os.kill(child.pid, signal.SIGCONT)
                child.stdin.write(b"go\n")
                await child.stdin.drain()
                said = (await child.stdout.readline()).decode().strip()
            finally:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                await child.wait()
            if settle == "abandon":
                await rival.consume(taken, "rival result")  # still the rival's claim
    assert said == "ClaimLost", f"a stale {settle} (generation 1, the job now at 2) said {said!r}"


@pytest.mark.parametrize("keep_result", [False, True])
async def test_a_post_whose_reply_is_lost_is_not_posted_twice_when_consumed_meanwhile(
        link: FaultLink, zk_hosts: str, keep_result: bool) -> None:
    url = board_url(link.hosts, session_timeout=10)
    with anyio.fail_after(60):
        async with open_board(url) as poster, open_board(url.replace(link.hosts, zk_hosts)) as consumer:
            link.lose_reply(hold=30)  # the server stores the post; the poster cannot reconnect
            posting = asyncio.ensure_future(poster.post("once", {"tag": "t-1"}, keep_result=keep_result))
            await link.faults.happened("lost_reply")
            (ready,) = await consumer.wait()
            claim = await consumer.claim(ready, "fast")
            await consumer.consume(claim, "done")  # before the poster's connection returns
            link.resume()
            job = await posting
            assert job.id == ready.id
            left = [(j.id, dict(j.details)) async for j in consumer.iterjobs()]
    assert left == [], f"the post was stored twice: {left} is on the board again after its consume"


@pytest.mark.parametrize("how", ["trash", "cancel", "max_attempts"])
async def test_trashing_the_root_of_a_diamond_trashes_each_dependent_once(zk_hosts: str, how: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(zk_hosts)) as board:
            root = await board.post("root", max_attempts=1)
            left = await board.post("left", depends_on=[root])
            right = await board.post("right", depends_on=[root])
            await board.post("join", depends_on=[left, right])  # reached from root by two paths
            if how == "trash":
                await board.trash(await board.claim(root, "me"), "bad input")
            elif how == "cancel":
                await board.cancel(root, "not needed")
            else:  # left unclaimable on the board for good, with its dependents
                await board.abandon(await board.claim(root, "me"))
                with pytest.raises(JobNotFound):  # its second attempt trashes it
                    await board.claim(root, "me")
            assert sorted([t.job.name async for t in board.trashed()]) == ["join", "left", "right", "root"]
            assert await board.job_count() == 0
