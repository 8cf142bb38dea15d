"""A board's close cut short by its caller's deadline leaves nothing behind: no task, no thread, no
descriptor (review F11)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import anyio
import pytest

from jobboard import open_board

pytestmark = pytest.mark.timeout(60)


def descriptors_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def board_tasks() -> list[str]:
    return [name for task in asyncio.all_tasks() if (name := task.get_name()).startswith("jobboard-sqlite")]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
@pytest.mark.parametrize("deadline", ["anyio", "asyncio"])
async def test_a_close_cut_short_leaves_no_task_thread_nor_descriptor(tmp_path: Path, deadline: str) -> None:
    threads = threading.active_count()
    for _ in range(3):
        manager = open_board(f"sqlite://{tmp_path}/jobs.db?board=cut")
        board = await manager.__aenter__()
        await board.post("x")
        with pytest.raises(TimeoutError):
            if deadline == "anyio":
                with anyio.fail_after(0):  # a deadline already past
                    await manager.__aexit__(None, None, None)
            else:
                async with asyncio.timeout(0):
                    await manager.__aexit__(None, None, None)
    with anyio.fail_after(10):
        while descriptors_under(tmp_path) or board_tasks() or threading.active_count() > threads:  # noqa: ASYNC110
            await anyio.sleep(0.05)  # the connections close on their threads, which then end
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=cut") as board:
        assert await board.job_count() == 3  # each post committed before its board's cut close
