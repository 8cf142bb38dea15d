"""Progress from running jobs, retention, purge and requeue: across processes and on the command line."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobboard import JobState, open_board
from jobboard.cli.plan import status_table
from jobboard.cli.trash import duration
from jobboard.job import Claim
from jobboard.plans.dag import Plan
from jobboard.plans.posting import post_plan
from jobboard.worker.conductor import Worker
from jobboard.worker.handlers import Handlers, JobContext
from jobboard.worker.progress import PROGRESS_INTERVAL
from jobboard_memory.board import MemoryBoard
from jobboard_zookeeper import ZooKeeperBoard
from tests.support.workers import running

pytestmark = pytest.mark.timeout(90)

HANDLERS = "tests.support.progress_handlers:handlers"


def jobboard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def zk_url(zk_hosts: str) -> str:
    return f"zookeeper://{zk_hosts}/keeping/{uuid.uuid4().hex}"


async def test_progress_of_a_worker_process_is_seen_by_another_process(zk_hosts: str, tmp_path: Path) -> None:
    url = zk_url(zk_hosts)
    finish = tmp_path / "finish"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobboard", "worker", url, "--handlers", HANDLERS, "--owner", "w-progress",
        stdout=asyncio.subprocess.PIPE)
    try:
        assert child.stdout is not None
        with anyio.fail_after(30):
            assert (await child.stdout.readline()).startswith(b"worker w-progress on ")
            async with open_board(url) as board:
                job = await board.post("halfway", {"until": str(finish)})
                while (await board.get(job)).progress is None:  # noqa: ASYNC110 - written by the worker
                    await anyio.sleep(0.05)
                seen = (await board.get(job)).progress
                assert seen is not None and (seen.fraction, seen.note) == (0.5, "halfway there")
                shown = await anyio.to_thread.run_sync(jobboard, "show", job.id, "--json", "--board", url)
                record = json.loads(shown.stdout)
                assert record["progress"]["fraction"] == 0.5 and record["owner"] == "w-progress"
                text = await anyio.to_thread.run_sync(jobboard, "show", job.id, "--board", url)
                assert "50% halfway there" in text.stdout
                listed = await anyio.to_thread.run_sync(jobboard, "list", "--board", url)
                assert "50% halfway there" in listed.stdout
                finish.touch()
                assert (await board.wait_for_completion(job)).state is JobState.COMPLETE
    finally:
        child.send_signal(signal.SIGTERM)
        await child.wait()


class CountingBoard(MemoryBoard):
    """A memory board counting the progress writes that reach it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.writes: list[float] = []

    async def report_progress(self, claim: Claim, fraction: float, note: str = "") -> None:
        self.writes.append(fraction)
        await super().report_progress(claim, fraction, note)


async def test_a_hundred_reports_in_a_second_make_at_most_two_writes() -> None:
    handlers = Handlers()
    burst: list[float] = []
    last: list[Any] = []

    @handlers.register("chatty")
    async def chatty(ctx: JobContext) -> None:
        start = anyio.current_time()
        for step in range(1, 101):
            ctx.progress(step / 100, f"step {step}")
            await anyio.sleep(0.008)
        burst.append(anyio.current_time() - start)
        with anyio.fail_after(10):  # the last value reaches the board within the interval
            while (progress := (await ctx.board.get(ctx.job)).progress) is None or progress.fraction < 1:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        last.append(progress)

    async with CountingBoard(f"memory://{uuid.uuid4().hex}") as board:
        job = await board.post("chatty")
        with anyio.fail_after(30):
            async with running(board, handlers):
                await board.wait_for_completion(job)
    during = [fraction for fraction in board.writes if fraction < 1.0]
    allowed = 1 + int(burst[0] / PROGRESS_INTERVAL)  # 2 when the burst took less than 2 s
    assert 1 <= len(during) <= allowed and (burst[0] > 1.0 or len(during) <= 2), (board.writes, burst)
    assert board.writes[-1] == 1.0 and board.writes.count(1.0) == 1
    assert (last[0].fraction, last[0].note) == (1.0, "step 100")


async def test_bad_progress_is_an_error_in_the_handler() -> None:
    handlers = Handlers()
    errors: list[str] = []

    @handlers.register("bad")
    async def bad(ctx: JobContext) -> None:
        for value in (2, -1, "x"):
            try:
                ctx.progress(value)  # type: ignore[arg-type]
            except Exception as error:  # noqa: BLE001 - what the handler sees
                errors.append(type(error).__name__)

    async with open_board(f"memory://{uuid.uuid4().hex}") as board:
        job = await board.post("bad")
        with anyio.fail_after(30):
            async with running(board, handlers):
                await board.wait_for_completion(job)
    assert errors == ["InvalidJob"] * 3


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("45s", 45), ("30m", 1800), ("12h", 43200),
                                               ("7d", 604800), ("2w", 1209600), ("1.5h", 5400), ("0", 0)])
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


async def test_purge_and_requeue_commands_on_zookeeper(zk_hosts: str) -> None:
    url = zk_url(zk_hosts)
    async with open_board(url) as board:
        resize = [await board.post("resize", {"n": n}, max_attempts=1) for n in range(2)]
        other = await board.post("other")
        parent = await board.post("parent")
        child = await board.post("child", depends_on=[parent])
        for job in resize:
            await board.trash(await board.claim(job, "w"), "failed")
        await board.cancel(other, "not wanted")
        await board.cancel(parent, "wrong")

    by_name = await anyio.to_thread.run_sync(jobboard, "requeue", "--name", "resize", "--reset-attempts",
                                             "--json", "--board", url)
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout) == {"requeued": [job.id for job in resize], "failed": {}}
    by_id = await anyio.to_thread.run_sync(jobboard, "requeue", child.id, parent.id, "--board", url)
    assert by_id.returncode == 1  # the cascaded child is refused, its parent comes back
    assert f"requeued {parent.id}" in by_id.stdout
    assert f"jobboard: error: not requeued {child.id}" in by_id.stderr
    usage = await anyio.to_thread.run_sync(jobboard, "requeue", "--all", other.id, "--board", url)
    assert usage.returncode == 2 and usage.stderr.startswith("jobboard: error: name the jobs one way")
    kept = await anyio.to_thread.run_sync(jobboard, "purge", "--older-than", "7d", "--json", "--board", url)
    assert json.loads(kept.stdout) == {"purged": 0, "older_than": 604800.0}
    purged = await anyio.to_thread.run_sync(jobboard, "purge", "--older-than", "0", "--board", url)
    assert purged.returncode == 0 and purged.stdout.startswith("purged 2 job(s)")
    bad = await anyio.to_thread.run_sync(jobboard, "purge", "--older-than", "soon", "--board", url)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    async with open_board(url) as board:
        assert [item async for item in board.trashed()] == []
        assert {job.id for job in [j async for j in board.iterjobs()]} == {*(j.id for j in resize), parent.id}
        assert [(await board.get(job)).attempts for job in resize] == [0, 0]
    nothing = await anyio.to_thread.run_sync(jobboard, "requeue", "--all", "--json", "--board", url)
    assert json.loads(nothing.stdout) == {"requeued": [], "failed": {}}


def test_purge_and_requeue_commands_on_memory() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    purged = jobboard("purge", "--older-than", "1h", "--json", "--board", url)
    assert purged.returncode == 0 and json.loads(purged.stdout)["purged"] == 0
    missing = jobboard("requeue", "job-0000000001", "--json", "--board", url)
    assert missing.returncode == 1
    assert list(json.loads(missing.stdout)["failed"]) == ["job-0000000001"]
    helped = jobboard("requeue", "--help")
    assert helped.returncode == 0 and "jobboard requeue --name resize" in helped.stdout


async def test_plan_status_shows_the_progress_of_running_tasks() -> None:
    handlers = Handlers()
    release = anyio.Event()

    @handlers.register("slow")
    async def slow(ctx: JobContext) -> None:
        ctx.progress(0.5, "half")
        await release.wait()

    plan = Plan("progressing")
    plan.task("slow", name="only")
    async with open_board(f"memory://{uuid.uuid4().hex}") as board:
        handle = await post_plan(board, plan)
        worker = Worker(board, handlers)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                while "only" not in (status := await handle.status()).progress_of:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                assert status.progress_of["only"].fraction == 0.5
                assert "(50% half)" in status_table(status)
                release.set()
                assert (await handle.wait()).state == "complete"
                worker.stop()
        assert (await handle.status()).progress_of == {}


async def test_retention_on_zookeeper_passes_to_another_board_when_the_collector_closes(zk_hosts: str) -> None:
    url = f"{zk_url(zk_hosts)}?trash_ttl=1"
    boards = [ZooKeeperBoard(url), ZooKeeperBoard(url)]
    with anyio.fail_after(30):
        for board in boards:
            await board.open()
        try:
            collector = f"{boards[0].backend.options.root}/collector"
            while (stat := await boards[0].backend.zk.exists(collector)) is None:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            holder = next(board for board in boards if board.backend.zk.session_id == stat.ephemeral_owner)
            survivor = boards[1] if holder is boards[0] else boards[0]
            job = await holder.post("doomed")
            await holder.cancel(job, "bad")
            await holder.aclose()  # the collector goes before the entry expires
            while [item async for item in survivor.trashed()]:  # noqa: ASYNC110 - collected by the board
                await anyio.sleep(0.05)
            stat = await survivor.backend.zk.exists(collector)
            assert stat is not None and stat.ephemeral_owner == survivor.backend.zk.session_id
            assert await survivor.state(job) is JobState.COMPLETE
        finally:
            for board in boards:
                await board.aclose()
