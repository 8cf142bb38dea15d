"""Flow control in the dashboard (issue 27): the overview's section, limits and pauses read as JSON; pause and
resume are actions guarded like the others (read-only refuses, the token is required); a board without flow
control shows no section and says 404."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest

from jobboard.backend import Backend
from jobboard.board.contract import JobBoard
from jobboard_memory import MemoryBackend
from tests.support.dashboard import TOKEN, ahttp, dashboard_in_loop

pytestmark = pytest.mark.timeout(60)


async def test_limits_are_read_and_pauses_are_guarded_actions(board: JobBoard) -> None:
    with anyio.fail_after(30):
        await board.set_limit("tenant-42", concurrency=2)
        await board.post("export", group="tenant-42")
        async with dashboard_in_loop(board) as base:
            status, _, body = await ahttp("GET", f"{base}/api/limits")
            assert status == 200 and json.loads(body) == {
                "limits": [{"group": "tenant-42", "concurrency": 2, "sequence": False, "rate": None, "running": 0,
                            "waiting": 1}],
                "paused": {"board": False, "names": []}}
            status, _, body = await ahttp("POST", f"{base}/api/pause?name=export", {"X-Jobboard-Token": TOKEN})
            assert status == 403 and "read-only" in body
            await board.set_limit("<script>window.__xss = 1</script>", rate="5/s")
            await board.pause("export")
            status, _, page = await ahttp("GET", f"{base}/")
            assert status == 200 and "Flow control" in page and "paused: export" in page
            assert "tenant-42" in page and "5/s" in page and "<script>window" not in page
            await board.resume("export")
        async with dashboard_in_loop(board, allow_actions=True, token=TOKEN) as base:
            status, _, _ = await ahttp("POST", f"{base}/api/pause?name=export", {"X-Jobboard-Token": "wrong"})
            assert status == 401 and (await board.paused()).names == frozenset()
            status, _, body = await ahttp("POST", f"{base}/api/pause?name=export", {"X-Jobboard-Token": TOKEN})
            assert status == 200 and json.loads(body)["paused"] == {"board": False, "names": ["export"]}
            assert await board.claim_next("w") is None
            status, _, body = await ahttp("POST", f"{base}/api/pause", {"X-Jobboard-Token": TOKEN})
            assert status == 200 and (await board.paused()).board
            for query in ("", "?name=export"):
                status, _, body = await ahttp("POST", f"{base}/api/resume{query}", {"X-Jobboard-Token": TOKEN})
                assert status == 200, body
            assert json.loads(body)["paused"] == {"board": False, "names": []}
            assert await board.claim_next("w") is not None
            status, _, body = await ahttp("POST", f"{base}/api/pause?name=%0A", {"X-Jobboard-Token": TOKEN})
            assert status == 400, body


class WithoutFlowControl(MemoryBackend):
    """memory:// as a backend that has not implemented flow control yet."""

    set_limit, clear_limit, limits = Backend.set_limit, Backend.clear_limit, Backend.limits
    pause, resume, paused = Backend.pause, Backend.resume, Backend.paused


async def test_a_board_without_flow_control_answers_404() -> None:
    with anyio.fail_after(30):
        async with JobBoard(WithoutFlowControl(f"memory://dash-{uuid.uuid4().hex}")) as board:
            assert not board.backend.flow_control
            async with dashboard_in_loop(board, allow_actions=True, token=TOKEN) as base:
                status, _, body = await ahttp("GET", f"{base}/api/limits")
                assert status == 404 and "flow control" in body
                status, _, body = await ahttp("POST", f"{base}/api/pause", {"X-Jobboard-Token": TOKEN})
                assert status == 404 and "flow control" in body
