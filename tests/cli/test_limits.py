"""``jobboard post --group``, ``limit``, ``pause``, ``resume`` and the flow control in ``stats`` (issue 27), through
``main([...])`` on memory:// boards, and the one-line refusal of a backend without flow control (sqlite://)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import anyio

from jobboard import open_board
from tests.cli.test_cli import Capture, run


def memory_url() -> str:
    return f"memory://cli-limits-{uuid.uuid4().hex}"


def test_limits_are_set_listed_shown_and_cleared(capsys: Capture) -> None:
    url = memory_url()
    assert run(capsys, "--board", url, "limit")[:2] == (0, "no limits\n")
    status, out, _ = run(capsys, "--board", url, "limit", "tenant-42", "--concurrency", "2")
    assert status == 0 and out.splitlines()[1].split() == ["tenant-42", "2", "-", "-", "0", "0"]
    status, out, _ = run(capsys, "--board", url, "post", "export", "--group", "tenant-42")
    job_id = out.strip()
    assert status == 0
    run(capsys, "--board", url, "limit", "payments", "--rate", "20/s")
    run(capsys, "--board", url, "limit", "account-7", "--sequence")
    status, out, _ = run(capsys, "--board", url, "limit", "--json")
    assert status == 0 and json.loads(out) == [
        {"group": "account-7", "concurrency": None, "sequence": True, "rate": None, "running": 0, "waiting": 0},
        {"group": "payments", "concurrency": None, "sequence": False, "rate": {"count": 20, "period": 1.0},
         "running": 0, "waiting": 0},
        {"group": "tenant-42", "concurrency": 2, "sequence": False, "rate": None, "running": 0, "waiting": 1}]
    status, out, _ = run(capsys, "--board", url, "show", job_id, "--json")
    assert status == 0 and json.loads(out)["group"] == "tenant-42"
    assert run(capsys, "--board", url, "limit", "tenant-42", "--clear")[:2] == (0, "tenant-42: limit cleared\n")
    assert run(capsys, "--board", url, "limit", "tenant-42", "--clear")[:2] == (0, "tenant-42: had no limit\n")
    assert run(capsys, "--board", url, "limit", "tenant-42")[:2] == (1, "tenant-42: no limit\n")


def test_bad_input_is_refused_in_one_line(capsys: Capture) -> None:
    url = memory_url()
    for argv, status, words in [(("limit", "g", "--rate", "abc"), 2, "argument --rate: rate must look like 20/s"),
                                (("limit", "g", "--rate", "0/s"), 2, "argument --rate: rate: the count must be"),
                                (("limit", "g", "--concurrency", "-1"), 2, "must be 0 or more"),
                                (("limit", "g", "--concurrency", "2", "--sequence"), 2, "one job at a time"),
                                (("limit", "--concurrency", "2"), 2, "name the GROUP"),
                                (("limit", "g", "--clear", "--sequence"), 2, "--clear takes no"),
                                (("limit", " ", "--concurrency", "1"), 2, "argument group: group must be a non-empty"),
                                (("post", "x", "--group", ""), 2, "argument --group: group must be a non-empty")]:
        got, _, err = run(capsys, "--board", url, *argv)
        errors = [line for line in err.splitlines() if "error" in line]
        assert (got, len(errors)) == (status, 1) and words in errors[0], (argv, err)


def test_pause_and_resume_and_stats_show_them(capsys: Capture) -> None:
    url = memory_url()
    assert run(capsys, "--board", url, "pause", "export")[:2] == (0, "paused: export\n")
    assert run(capsys, "--board", url, "pause")[:2] == (0, "paused: the whole board, export\n")
    run(capsys, "--board", url, "limit", "g", "--concurrency", "1")
    status, out, _ = run(capsys, "--board", url, "stats")
    assert status == 0 and "paused: the whole board, export" in out and "group  concurrency" in out
    status, out, _ = run(capsys, "--board", url, "stats", "--json")
    record = json.loads(out)
    assert record["paused"] == {"board": True, "names": ["export"]} and record["limits"][0]["group"] == "g"
    status, out, _ = run(capsys, "--board", url, "top", "--once", "--jobs", "1")
    assert status == 0 and "paused: the whole board, export" in out and "group  concurrency" in out
    assert run(capsys, "--board", url, "resume")[:2] == (0, "paused: export\n")
    assert run(capsys, "--board", url, "resume", "export")[:2] == (0, "paused: nothing\n")

    async def claimable() -> bool:
        async with open_board(url) as board:
            await board.post("export")
            claim = await board.claim_next("w")
            return claim is not None

    assert anyio.run(claimable)


def test_a_backend_without_flow_control_says_so_in_one_line(capsys: Capture, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/board.db"
    status, out, _ = run(capsys, "--board", url, "post", "x", "--group", "g")  # a group is stored everywhere
    assert status == 0
    status, out, _ = run(capsys, "--board", url, "show", out.strip(), "--json")
    assert json.loads(out)["group"] == "g"
    status, _, err = run(capsys, "--board", url, "pause", "x")
    if status == 0:  # the sqlite:// backend has flow control now: nothing to refuse
        assert run(capsys, "--board", url, "resume", "x")[0] == 0
        return
    assert status == 1 and len(err.splitlines()) == 1 and "flow control" in err
    status, out, _ = run(capsys, "--board", url, "stats")
    assert status == 0 and "paused" not in out  # stats leaves out what the backend does not have
