"""The ZooKeeper board's watched view: complete when opened mid-traffic, and no leak per job."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import open_board
from jobboard_zookeeper import ZooKeeperBackend

pytestmark = pytest.mark.timeout(60)


BEFORE = 50
"""Jobs posted before the late board starts opening."""
AFTER = 50
"""Jobs posted once it is open."""
MOST = 5000


async def test_a_board_opened_while_jobs_are_posted_sees_all_of_them(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/view/{uuid.uuid4().hex}"
    with anyio.fail_after(45):
        async with open_board(url) as producer:
            posted: list[str] = []
            opening, opened = anyio.Event(), anyio.Event()

            async def post_until_after_the_open() -> None:
                after = 0
                while after < AFTER and len(posted) < MOST:
                    posted.append((await producer.post("j", {"i": len(posted)})).id)
                    after += opened.is_set()
                    if len(posted) == BEFORE:
                        opening.set()

            async with anyio.create_task_group() as group:
                group.start_soon(post_until_after_the_open)
                await opening.wait()
                began = len(posted)
                late = await open_board(url).__aenter__()  # opens (and lists) while posts go on
                during = len(posted) - began
                opened.set()
            try:
                print(f"{began} jobs posted before the open, {during} while it opened, "
                      f"{len(posted) - began - during} after")
                assert during >= 1 and len(posted) - began - during == AFTER  # the open overlapped the posts
                claimed = []
                while (claim := await late.claim_next("late")) is not None:
                    await late.consume(claim)
                    claimed.append(claim.job.id)
                assert sorted(claimed) == sorted(posted)  # nothing missing from its view
            finally:
                await late.aclose()


async def test_watch_events_leave_no_callback_entries_behind(zk_hosts: str) -> None:
    url = f"zookeeper://{zk_hosts}/view/{uuid.uuid4().hex}"
    with anyio.fail_after(45):
        async with open_board(url) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            for index in range(200):
                claim = await board.claim(await board.post("j", {"i": index}), "w")
                await board.consume(claim)
            # aiozk re-sends every key here as one SetWatches after a reconnect; they must not pile up
            assert len(board.backend.zk._session.watch_callbacks) == 0
