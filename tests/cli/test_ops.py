"""``stats``, ``top``, ``--json`` on every read command, the exit statuses, ``--help`` examples and
docs/cli.md (issue 13): real processes against ZooKeeper and Redis; ``memory://`` in-process."""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobboard import JobBoard, open_board
from jobboard.cli.app import build_parser
from tests.cli.test_cli import Capture, run
from tests.cli.test_edges import started, strict_json
from tests.cli.test_results import cli, clis
from tests.support.boards import fresh_board_url
from tests.support.localserver import free_port, refused_port
from tests.support.zkserver import ZooKeeperServer

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"


@pytest.fixture(params=("zookeeper", "redis"))
def url(request: pytest.FixtureRequest) -> str:
    return fresh_board_url(request, "cli-ops")


async def busy_board(board: JobBoard) -> dict[str, str]:
    """Two resize jobs (one claimed by the live worker w-1), a high-priority report, a waiting zip,
    one job in the trash."""
    await board.register_entity("w-1", {"host": "test"})
    first = await board.post("resize", {"image": "a.png", "inf": float("inf")})
    await board.post("resize")
    report = await board.post("report", priority="high")
    waiting = await board.post("zip", depends_on=[report])
    claim = await board.claim(first, "w-1")
    doomed = await board.post("doomed")
    await board.cancel(doomed, "not needed")
    return {"claimed": claim.job.id, "report": report.id, "waiting": waiting.id, "trashed": doomed.id}


async def test_stats_as_text_and_json(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            ids = await busy_board(board)
            text = await cli(url, "stats")
            record: Any = strict_json((await cli(url, "stats", "--json")).stdout)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "jobs: 4 (unclaimed 2, claimed 1, waiting 1)"
    assert lines[1] == "by priority: high 1, normal 3"
    assert lines[2].startswith("oldest unclaimed: ") and lines[2].endswith("trash: 1    workers: 1")
    assert ["resize", "1", "1", "0"] in [line.split() for line in lines]
    assert any(line.startswith("w-1") and f"{ids['claimed']} resize" in line for line in lines)
    assert (record["by_state"], record["trash_size"]) == ({"unclaimed": 2, "claimed": 1, "waiting": 1}, 1)
    assert record["by_name"]["resize"] == {"unclaimed": 1, "claimed": 1}
    assert record["by_priority"] == {"high": 1, "normal": 3}
    [worker] = record["workers"]
    assert (worker["name"], [job["id"] for job in worker["running"]]) == ("w-1", [ids["claimed"]])


async def test_top_draws_a_frame_then_redraws_on_an_event(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            ids = await busy_board(board)
            once = await cli(url, "top", "--once")
            assert once.returncode == 0, once.stderr
            assert "\x1b" not in once.stdout  # not a terminal: plain frames
            assert once.stdout.startswith(f"jobboard top: {url} at ")
            assert "jobs: 4 (unclaimed 2, claimed 1, waiting 1)" in once.stdout
            assert all(job_id in once.stdout for key, job_id in ids.items() if key != "trashed")
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "jobboard", "top", "--board", url, "--iterations", "50", "--interval", "40",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                assert child.stdout is not None
                assert (await child.stdout.readline()).startswith(b"jobboard top: ")  # frame 1 is written whole
                late = await board.post("late-arrival")
                with anyio.fail_after(20):  # redrawn from the post's events, long before the 40 s interval
                    line = b"-"
                    while line and late.id.encode() not in line:
                        line = await child.stdout.readline()
                assert line, "top ended before it drew the posted job"
            finally:
                child.terminate()
                await child.wait()


def test_top_on_a_terminal_draws_each_frame_over_the_last() -> None:
    primary, secondary = pty.openpty()
    try:
        child = subprocess.run([sys.executable, "-m", "jobboard", "top", "--board", "memory://tty", "--once"],
                               stdout=secondary, stderr=subprocess.PIPE, timeout=60, check=False)
        os.close(secondary)
        output = b""
        while chunk := _read(primary):
            output += chunk
    finally:
        os.close(primary)
    assert child.returncode == 0, child.stderr
    text = output.decode()
    assert text.startswith("\x1b[H") and text.rstrip().endswith("\x1b[J") and "\x1b[K" in text
    assert "jobs: 0 (none)" in text


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal's other side is closed: everything was read
        return b""


READ_COMMANDS: dict[str, tuple[str, ...]] = {
    "list": ("list",), "show": ("show", "{claimed}"), "result": ("result", "{trashed}"),
    "wait": ("wait", "{trashed}"), "trashed": ("trashed",), "stats": ("stats",),
    "plan list": ("plan", "list"), "check": ("check",),
}
"""Every read command with ``--json`` (plan status is covered by tests/cli/test_plan.py's board)."""


async def test_every_read_command_prints_strict_json(url: str) -> None:
    with anyio.fail_after(60):
        async with open_board(url) as board:
            ids = await busy_board(board)
            # Reads only: the processes run side by side, their outputs are checked in this order.
            outputs = await clis(url, *((*(arg.format(**ids) for arg in argv), "--json") for argv in READ_COMMANDS.values()))
            done = dict(zip(READ_COMMANDS, outputs, strict=True))
    for name, result in done.items():
        assert result.returncode in (0, 1) and result.stderr == "", (name, result.stderr)
        strict_json(result.stdout)
    assert strict_json(done["show"].stdout)["details"]["inf"] == "Infinity"  # type: ignore[index]


UNREACHABLE = (*READ_COMMANDS, "top")


def test_an_unreachable_board_exits_3_with_one_error_line() -> None:
    """Every read command, each a process (run side by side: each waits out its connect timeout)."""
    with refused_port() as port:
        unreachable_exits_3(f"zookeeper://127.0.0.1:{port}/cli-ops?connect_timeout=1")


def unreachable_exits_3(url: str) -> None:
    children = {
        command: subprocess.Popen(
            [sys.executable, "-m", "jobboard", "--board", url,
             *(("top", "--once") if command == "top" else READ_COMMANDS[command])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for command in UNREACHABLE
    }
    for command, child in children.items():
        out, err = child.communicate(timeout=60)
        assert (child.returncode, out, err.count("jobboard: error: ")) == (3, "", 1), (command, err)
        assert err.splitlines()[-1].startswith("jobboard: error: no ZooKeeper server reachable"), command


@pytest.mark.parametrize("argv", [
    ("wait", "job-1", "--timeout", "soon"), ("top", "--iterations", "0"), ("top", "--once", "--iterations", "2"),
    ("result",), ("cancel",), ("stats", "--verbose-please"), ("plan", "list", "extra"),
])
def test_usage_errors_exit_2(capsys: Capture, argv: tuple[str, ...]) -> None:
    status, out, err = run(capsys, "--board", "memory://usage", *argv)
    assert (status, out) == (2, "") and "error:" in err


def test_exit_statuses_0_1_2_3_as_processes(tmp_path: Path) -> None:
    """One process per status: 0 ok, 1 not met, 2 usage, 3 unreachable (``result``, ``wait`` and ``cancel``
    give 1 on ZooKeeper and Redis in tests/cli/test_results.py)."""
    with refused_port() as port:
        statuses_as_processes(tmp_path, f"zookeeper://127.0.0.1:{port}/cli-ops?connect_timeout=1")


def statuses_as_processes(tmp_path: Path, zookeeper: str) -> None:
    runs = {
        "ok": ("--board", "memory://exits", "stats"),
        "not met": ("--board", "memory://exits", "cancel", "job-1"),
        "usage": ("--board", "memory://exits", "wait"),
        "unreachable": ("--board", zookeeper, "stats"),
    }
    children = {what: subprocess.Popen([sys.executable, "-m", "jobboard", *argv], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for what, argv in runs.items()}
    statuses = {what: child.wait(timeout=60) for what, child in children.items()}
    assert statuses == {"ok": 0, "not met": 1, "usage": 2, "unreachable": 3}


def test_stats_and_top_on_memory(capsys: Capture) -> None:
    url = f"memory://cli-ops-{uuid.uuid4().hex}"

    async def setup() -> dict[str, str]:
        async with open_board(url) as board:
            return await busy_board(board)

    ids = anyio.run(setup)
    status, out, _ = run(capsys, "--board", url, "stats", "--json")
    record: Any = strict_json(out)
    assert (status, record["by_state"]["waiting"], record["trash_size"]) == (0, 1, 1)
    status, out, _ = run(capsys, "--board", url, "top", "--iterations", "2", "--interval", "0.1", "--jobs", "1")
    frames = out.split("jobboard top: ")[1:]
    assert status == 0 and len(frames) == 2
    assert ids["report"] in frames[1] and "... and 3 more jobs" in frames[1]  # the high-priority job first


# -- --help and docs/cli.md --------------------------------------------------------------------------


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def every_command() -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for name, sub in subparsers(build_parser()).items():
        found.append((name, sub))
        found += [(f"{name} {action}", parser) for action, parser in subparsers(sub).items()]
    return found


@pytest.mark.parametrize(("name", "parser"), every_command(), ids=lambda value: value if isinstance(value, str) else "")
def test_every_command_has_an_example_in_its_help(name: str, parser: argparse.ArgumentParser,
                                                 capsys: Capture) -> None:
    status, out, _ = run(capsys, *name.split(), "--help")
    assert status == 0
    examples = re.split(r"\nexamples?:\n", out, maxsplit=1)[1].split("\n\n", 1)[0].splitlines()
    assert examples and all(line.startswith(("  jobboard ", "  echo ")) for line in examples)
    if name != "plan":  # plan's own examples show its actions
        assert any(f" {name} " in f"{line} " for line in examples), examples


def test_docs_cli_covers_every_command_option_and_exit_status() -> None:
    doc = CLI_DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^#+ `jobboard ([^`]+)`", doc, re.MULTILINE)
    placeholders = re.findall(r"^## (Requeue / purge|Schedule|Metrics)\n", doc, re.MULTILINE | re.IGNORECASE)
    elsewhere = {word.lower() for heading in placeholders for word in re.findall(r"\w+", heading)}
    missing = []
    for name, parser in every_command():
        if subparsers(parser) or name.split()[0] in elsewhere:
            continue  # plan: its actions are documented one by one; placeholders: on other pages
        if not any(heading == name or heading.startswith(f"{name} ") for heading in headings):
            missing.append(f"command {name}")
        heading = re.search(rf"^#+ `jobboard {name}[` ]", doc, re.MULTILINE)
        section = re.split(r"\n#{2,3} ", doc[heading.end():] if heading else "", maxsplit=1)[0]
        for action in parser._actions:
            options = [o for o in action.option_strings if o.startswith("--") and o not in ("--help", "--board",
                                                                                             "--verbose")]
            if options and not any(f"`{option}" in section for option in options):
                missing.append(f"{name} {options[0]}")
    assert not missing, missing
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert status in doc
    assert elsewhere == {"requeue", "purge", "schedule", "metrics"}


def test_top_piped_into_a_reader_that_stops_exits_0_quietly() -> None:
    """``jobboard top | head -1``: a closed stdout ends the command without a traceback."""
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "top", "--board", "memory://pipe", "--interval", "0.1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.readline().startswith("jobboard top: memory://pipe at ")
    child.stdout.close()
    assert child.wait(timeout=30) == 0
    assert child.stderr.read() == ""
    child.stderr.close()


def test_a_command_started_while_zookeeper_is_down_succeeds_when_it_comes_back() -> None:
    """Rough edge: a command started during an outage failed even if the server returned within its
    connect timeout. It names the cause at once, keeps retrying, and succeeds."""
    port = free_port()
    with started("stats", "--json", "--board", f"zookeeper://127.0.0.1:{port}/cli-ops?connect_timeout=60") as child:
        assert child.stderr is not None
        warning = child.stderr.readline()  # said at once, while it keeps trying
        assert warning.startswith(f"jobboard: WARNING: cannot connect to ZooKeeper at 127.0.0.1:{port}: "
                                  "connection refused"), warning
        with ZooKeeperServer(port=port):
            out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert strict_json(out)["total"] == 0  # type: ignore[index]
