"""A board closed under a running worker ends ``Worker.run`` with the ``BoardClosed`` its docstring promises,
not a task group's ``ExceptionGroup`` wrapping it: the CLI then says it in one line (the tryout's problem H: a
sqlite:// file deleted under ``jobboard worker`` printed a 98-line exception-group traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BoardClosed
from jobboard.worker import Handlers, JobContext, Worker, WorkerConfig

pytestmark = pytest.mark.timeout(60)


async def test_a_board_closed_under_a_worker_ends_its_run_with_board_closed() -> None:
    handlers = Handlers()

    @handlers.register("x")
    async def x(ctx: JobContext) -> None:
        return None

    with anyio.fail_after(20):
        board = await open_board("memory://closed-under").__aenter__()
        worker = Worker(board, handlers, WorkerConfig(concurrency=2))
        async def close_soon() -> None:
            await worker.started.wait()
            await board.aclose()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(close_soon)
            with pytest.raises(BoardClosed):
                await worker.run()


HANDLERS = """
from jobboard.worker import Handlers, JobContext
handlers = Handlers()
@handlers.register("rec")
async def rec(ctx: JobContext) -> None:
    return None
"""


def test_jobboard_worker_says_in_one_line_that_its_sqlite_file_was_deleted(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(HANDLERS)
    db = tmp_path / "b" / "jobs.db"
    db.parent.mkdir()
    url = f"sqlite://{db}"
    jobboard = [sys.executable, "-m", "jobboard"]
    subprocess.run([*jobboard, "post", "rec", "--board", url], check=True, capture_output=True, timeout=30)
    worker = subprocess.Popen([*jobboard, "worker", "--board", url, "--handlers", "app:handlers"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and db.exists():
            done = subprocess.run([*jobboard, "list", "--board", url], check=False, capture_output=True, text=True,
                                  timeout=30)
            if "job-" not in done.stdout:  # consumed: the worker runs on the file
                break
            time.sleep(0.2)
        for path in db.parent.glob("jobs.db*"):
            subprocess.run(["rm", "-rf", str(path)], check=True)
        out, _ = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode not in (0, None)
    assert "Traceback" not in out, out
    assert "was deleted under this board" in out.splitlines()[-1], out
