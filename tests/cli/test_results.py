"""``show`` of finished jobs, ``result``, ``wait``, ``cancel ID…``, ``list`` and ``plan list`` (issue 13).

Real processes (``python -m jobboard``) against ZooKeeper and Redis; ``memory://`` boards live in
one process, so their tests call ``main`` in-process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

import anyio
import pytest

from jobboard import ClaimLost, JobBoard, JobState, open_board
from jobboard.cli import main
from jobboard.job import LastError
from jobboard.plans.posting import post_plan
from jobboard.worker.conductor import Worker
from tests.cli.test_cli import Capture, run
from tests.cli.test_edges import strict_json
from tests.cli.test_plan import small_plan
from tests.support.boards import fresh_board_url

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=("zookeeper", "redis"))
def url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "cli-results")


def jobboard(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *argv], capture_output=True, text=True,
                          timeout=60, check=False)


async def cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``jobboard ARGV --board URL`` as a process, without blocking the event loop."""
    return await anyio.to_thread.run_sync(jobboard, *argv, "--board", url)


async def clis(url: str, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Each of ``commands`` as :func:`cli`, side by side (for commands that only read), in their order."""
    done: dict[int, subprocess.CompletedProcess[str]] = {}

    async def one(index: int, argv: tuple[str, ...]) -> None:
        done[index] = await cli(url, *argv)

    async with anyio.create_task_group() as group:
        for index, argv in enumerate(commands):
            group.start_soon(one, index, argv)
    return [done[index] for index in range(len(commands))]


def fields(out: str) -> dict[str, str]:
    return dict(line.split(None, 1) if " " in line else (line, "") for line in out.splitlines()
                if line and not line.startswith(" "))


async def finished_jobs(board: JobBoard) -> tuple[str, str, str]:
    """A consumed job with a kept result, a trashed one with a last error, an unclaimed one."""
    done = await board.post("resize", {"image": "a.png"}, keep_result=True)
    await board.consume(await board.claim(done, "w1"), {"width": 64, "ratio": float("inf")})
    failed = await board.post("parse")
    claim = await board.claim(failed, "w1")
    try:
        raise ValueError("notes.txt is not CSV")
    except ValueError as error:
        await board.trash(claim, "failed: not CSV", error=LastError.from_exception(error, 1))
    waiting = await board.post("later")
    return done.id, failed.id, waiting.id


async def test_show_result_and_wait_of_finished_jobs(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            done, failed, pending = await finished_jobs(board)
        # Reads only: the processes run side by side, their outputs are checked in this order.
        shown, shown_failed, result, result_json, result_failed, unfinished, timed_out, shown_pending = await clis(
            url, ("show", done), ("show", failed, "--json"), ("result", done), ("result", done, "--json"),
            ("result", failed), ("result", pending), ("wait", pending, "--timeout", "0.5", "--json"),
            ("show", pending, "--json"))
        assert shown.returncode == 0, shown.stderr
        assert fields(shown.stdout)["state:"] == "complete"
        assert json.loads(fields(shown.stdout)["result:"]) == {"width": 64, "ratio": "Infinity"}
        trashed: Any = strict_json(shown_failed.stdout)
        assert (trashed["state"], trashed["trash_reason"]) == ("trashed", "failed: not CSV")
        assert trashed["last_error"]["type"] == "ValueError" and "not CSV" in trashed["last_error"]["message"]
        assert (result.returncode, fields(result.stdout)["outcome:"]) == (0, "complete")
        record: Any = strict_json(result_json.stdout)
        assert {key: record[key] for key in ("id", "state", "finished", "result")} == {
            "id": done, "state": "complete", "finished": True, "result": {"width": 64, "ratio": "Infinity"}}
        assert result_failed.returncode == 1
        assert fields(result_failed.stdout)["reason:"] == "failed: not CSV"
        assert fields(result_failed.stdout)["last_error:"].startswith("ValueError: notes.txt is not CSV")
        assert (unfinished.returncode, unfinished.stdout) == (1, "")
        assert unfinished.stderr == f"jobboard: {pending} is not finished: unclaimed\n"
        assert timed_out.returncode == 1
        assert strict_json(timed_out.stdout) == strict_json(shown_pending.stdout)


async def test_a_mistyped_id_is_an_error_not_a_complete_job(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            done, _, _ = await finished_jobs(board)
        for command in (("show",), ("result",), ("wait", "--timeout", "5")):
            found = await cli(url, *command, done + "x")
            assert (found.returncode, found.stdout) == (1, ""), found
            assert found.stderr == (f"jobboard: error: no job '{done}x' was ever posted on this board: "
                                    "its ids do not look like that\n")
        assert (await cli(url, "show", done)).returncode == 0  # the id as given is a consumed job


async def test_an_id_the_board_has_not_given_yet_is_an_error(url: str) -> None:
    """``wait ID && deploy`` must not succeed on a well-formed id from another board."""
    with anyio.fail_after(60):
        async with open_board(url) as board:
            done, _, _ = await finished_jobs(board)
        not_yet = "999999" if url.startswith("redis") else "2-9999999999999"
        for command in (("show",), ("result",), ("wait", "--timeout", "5")):
            found = await cli(url, *command, not_yet)
            assert (found.returncode, found.stdout) == (1, ""), found
            assert found.stderr == (f"jobboard: error: no job '{not_yet}' was ever posted on this board: "
                                    "it has not given that id yet\n")
        shown = await cli(url, "show", done)  # consumed, with its kept result: not an error
        assert (shown.returncode, fields(shown.stdout)["state:"]) == (0, "complete")


async def test_wait_returns_when_the_job_is_consumed(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            job = await board.post("resize", keep_result=True)
            waiter = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "jobboard", "wait", job.id, "--board", url, "--timeout", "50",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            await anyio.sleep(1.0)  # the waiter is (most likely) subscribed by now; either way it must end
            assert waiter.returncode is None
            await board.consume(await board.claim(job, "w1"), ["done", 1])
            out, err = await waiter.communicate()
    assert waiter.returncode == 0, err
    assert fields(out.decode()) == {"id:": job.id, "outcome:": "complete", "result:": '["done", 1]'}


async def test_cancel_of_several_ids_unclaimed_waiting_claimed_and_missing(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            free = await board.post("a")
            waiting = await board.post("b", depends_on=[await board.post("first")])  # (dependents follow)
            held = await board.post("c")
            claim = await board.claim(held, "worker-7")
            done = await cli(url, "cancel", free.id, waiting.id, "job-missing", held.id, "--reason", "enough")
            assert done.returncode == 1
            assert done.stderr.count("\n") == 1 and done.stderr.startswith("jobboard: error: ")
            assert "job-missing" in done.stderr
            assert done.stdout.splitlines() == [
                f"cancelled {free.id}: enough", f"cancelled {waiting.id}: enough",
                f"cancelled {held.id} (its claim by worker-7 revoked): enough"]
            assert [await board.state(job) for job in (free, waiting, held)] == [JobState.TRASHED] * 3
            with pytest.raises(ClaimLost):
                await board.consume(claim)
            trashed = {item.job.id: item for item in [item async for item in board.trashed()]}
            assert trashed[held.id].job.attempts == 1 and trashed[free.id].job.attempts == 0


async def test_list_and_plan_list_with_json(url: str) -> None:
    plan, handlers = small_plan()
    with anyio.fail_after(60):
        async with open_board(url) as board:
            handle = await post_plan(board, plan)
            listed = await cli(url, "plan", "list")
            assert listed.returncode == 0, listed.stderr
            header, row = listed.stdout.splitlines()
            assert header.split() == ["id", "name", "state", "posted_at", "done", "running", "failed", "pending"]
            assert row.split()[:3] == [handle.plan_id, "sums", "running"] and row.split()[4:] == ["0/5", "0", "0", "5"]
            jobs = strict_json((await cli(url, "list", "--json")).stdout)
            assert isinstance(jobs, list) and len(jobs) == 6  # five tasks and the plan's record
            worker = Worker(board, handlers)
            async with anyio.create_task_group() as group:
                group.start_soon(worker.run)
                await board.wait_for_completion(handle.ids["total"])  # the last task; nobody waits for the plan
                worker.stop()
            records: Any = strict_json((await cli(url, "plan", "list", "--json")).stdout)
            status: Any = strict_json((await cli(url, "plan", "status", handle.plan_id, "--json")).stdout)
    assert (status["state"], status["done"], status["tasks"]["total"]["state"]) == ("complete", 5, "complete")
    [record] = records
    assert {key: record[key] for key in ("id", "name", "state", "total", "done", "running", "failed")} == {
        "id": handle.plan_id, "name": "sums", "state": "complete", "total": 5, "done": 5, "running": 0, "failed": 0}


# -- memory:// (in-process) ----------------------------------------------------------------------------


@pytest.fixture
def memory_url() -> str:
    return f"memory://cli-results-{uuid.uuid4().hex}"


def test_show_result_wait_and_cancel_on_memory(capsys: Capture, memory_url: str) -> None:
    async def setup() -> tuple[str, str, str]:
        with anyio.fail_after(10):
            async with open_board(memory_url) as board:
                return await finished_jobs(board)

    done, failed, pending = anyio.run(setup)
    status, out, _ = run(capsys, "--board", memory_url, "show", done)
    assert (status, fields(out)["state:"]) == (0, "complete")
    status, out, _ = run(capsys, "--board", memory_url, "result", failed)
    assert (status, fields(out)["outcome:"]) == (1, "trashed")
    status, out, err = run(capsys, "--board", memory_url, "wait", pending, "--timeout", "0.2")
    assert (status, out, err) == (1, "", f"jobboard: {pending} is not finished after 0.2 s: unclaimed\n")
    status, out, _ = run(capsys, "--board", memory_url, "cancel", pending, "--reason", "stop")
    assert (status, out) == (0, f"cancelled {pending}: stop\n")
    status, out, _ = run(capsys, "--board", memory_url, "wait", pending, "--json")
    record: Any = strict_json(out)
    assert (status, record["state"], record["trash_reason"]) == (1, "trashed", "stop")


def test_list_reads_no_state_or_owner_per_job(capsys: Capture, memory_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Rough edge: ``list`` made two extra reads per job (state, owner); one listing now."""
    for _ in range(3):
        assert main(["--board", memory_url, "post", "resize"]) == 0
    capsys.readouterr()
    board_class = type(open_board(memory_url))

    async def refuse(self: object, job: object) -> None:
        raise AssertionError("list read a job's state or owner")

    monkeypatch.setattr(board_class, "state", refuse)
    monkeypatch.setattr(board_class, "owner", refuse)
    status, out, err = run(capsys, "--board", memory_url, "list")
    assert (status, err, len(out.splitlines())) == (0, "", 4)
