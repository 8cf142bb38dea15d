"""The command line's rough edges (issue 13), each driven through ``main([...])`` on ``memory://``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from tests.cli.test_cli import Capture, assert_one_line_error, post, run, table
from tests.support.localserver import refused_port


@pytest.fixture
def url() -> str:
    return f"memory://edges-{uuid.uuid4().hex}"


def test_trash_of_a_waiting_job_trashes_it_without_an_attempt(capsys: Capture, url: str) -> None:
    first = post(capsys, url, "resize")
    waiting = post(capsys, url, "zip", "--after", first)
    status, out, err = run(capsys, "--board", url, "trash", waiting, "--reason", "not needed")
    assert (status, err) == (0, "") and waiting in out
    status, out, _ = run(capsys, "--board", url, "show", waiting, "--json")
    record = json.loads(out)
    assert (record["state"], record["attempts"], record["trash_reason"]) == ("trashed", 0, "not needed")


def test_trash_of_an_unclaimed_job_counts_no_attempt(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize", "--max-attempts", "1")
    assert run(capsys, "--board", url, "trash", job_id)[0] == 0
    record = json.loads(run(capsys, "--board", url, "show", job_id, "--json")[1])
    assert (record["state"], record["attempts"]) == ("trashed", 0)


def test_plan_status_of_an_ordinary_job_is_one_line(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize", "--details", '{"image": "a.png"}')
    for action in ("status", "wait", "show", "cancel"):
        status, out, err = run(capsys, "--board", url, "plan", action, job_id)
        assert (status, out) == (1, "")
        assert_one_line_error(err, job_id, "not a plan")


def test_trashed_shows_the_first_line_of_a_multi_line_reason(url: str, capsys: Capture) -> None:
    reason = "ValueError: bad image\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError"

    async def trash_with_a_traceback() -> str:
        with anyio.fail_after(10):
            async with open_board(url) as board:
                job = await board.post("resize")
                await board.trash(await board.claim(job, "w"), reason)
                return job.id

    job_id = anyio.run(trash_with_a_traceback)
    status, out, _ = run(capsys, "--board", url, "trashed")
    assert status == 0
    assert len(out.splitlines()) == 2
    assert out.splitlines()[1].endswith("ValueError: bad image")
    assert table(out)[1][0] == job_id


def strict_json(text: str) -> object:
    """``json.loads`` refusing what is not JSON (``Infinity``, ``NaN``)."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_json_for_any_details(capsys: Capture, url: str) -> None:
    details = {"inf": float("inf"), "nan": float("nan"), "raw": b"\xff\x00", "pair": (1, 2), "ints": {1: 2}}

    async def post_odd_details() -> str:
        with anyio.fail_after(10):
            async with open_board(url) as board:
                return (await board.post("odd", details)).id

    job_id = anyio.run(post_odd_details)
    from_cli = post(capsys, url, "odd", "--details", '{"big": Infinity, "small": -Infinity}')
    status, out, _ = run(capsys, "--board", url, "show", job_id, "--json")
    assert status == 0
    record = strict_json(out)
    assert isinstance(record, dict)
    assert record["details"] == {"inf": "Infinity", "nan": "NaN", "raw": "\\xff\x00", "pair": [1, 2],
                                 "ints": {"1": 2}}
    status, out, _ = run(capsys, "--board", url, "list", "--json")
    records = strict_json(out)
    assert status == 0 and isinstance(records, list)
    assert {r["id"]: r["details"] for r in records}[from_cli] == {"big": "Infinity", "small": "-Infinity"}


def test_verbose_is_accepted_after_the_command(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize")
    status, out, _ = run(capsys, "--board", url, "show", job_id, "-v")
    assert status == 0 and job_id in out
    status, _, _ = run(capsys, "list", "--board", url, "--verbose")
    assert status == 0


def test_a_negative_value_gets_the_options_own_message(capsys: Capture, url: str) -> None:
    """argparse took ``-1d`` for an option and said only "expected one argument"."""
    status, _, err = run(capsys, "--board", url, "purge", "--older-than", "-1d")
    assert status == 2 and "argument --older-than: not a duration: '-1d'" in err
    status, _, err = run(capsys, "--board", url, "post", "resize", "--delay", "-1e3")
    assert status == 2 and "argument --delay: seconds must be a finite number >= 0, not -1e3" in err
    status, _, err = run(capsys, "--board", url, "post", "resize", "--max-attempts", "-3")  # a plain number
    assert status == 2 and "argument --max-attempts: must be 1 or more, not -3" in err
    status, _, err = run(capsys, "--board", url, "purge", "--older", "-1d")  # abbreviated, as argparse allows
    assert status == 2 and "argument --older-than: not a duration: '-1d'" in err
    status, out, _ = run(capsys, "--board", url, "post", "--", "-1d")  # after "--": a positional, as given
    assert status == 0 and out.strip()
    status, _, err = run(capsys, "--board", url, "list", "--json", "-1")  # a flag takes no value
    assert status == 2 and "unrecognized arguments: -1" in err
    status, out, _ = run(capsys, "--board", url, "purge", "--older-than", "1d")
    assert status == 0 and out.startswith("purged 0 job(s)")


@pytest.mark.parametrize("action", ["status", "wait", "show", "cancel", "cleanup"])
def test_plan_has_help_per_action(capsys: Capture, action: str) -> None:
    status, out, _ = run(capsys, "plan", action, "--help")
    assert status == 0
    assert out.startswith(f"usage: jobboard plan {action} ")
    assert ("plan_id" in out) is (action != "cleanup")
    assert ("--format" in out) is (action == "show")


def test_details_from_a_file_of_200_kb(capsys: Capture, url: str, tmp_path: Path) -> None:
    details = {"text": "x" * 200_000, "n": 1}
    path = tmp_path / "details.json"
    path.write_text(json.dumps(details), encoding="utf-8")
    job_id = post(capsys, url, "big", "--details", f"@{path}")
    record = json.loads(run(capsys, "--board", url, "show", job_id, "--json")[1])
    assert record["details"] == details


def test_details_from_stdin(capsys: Capture, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"image": "a.png"}\n'))
    job_id = post(capsys, url, "resize", "--details", "-")
    record = json.loads(run(capsys, "--board", url, "show", job_id, "--json")[1])
    assert record["details"] == {"image": "a.png"}


@pytest.mark.parametrize(("content", "fragments"), [
    (None, ("cannot read", "No such file")),
    (b"not json", ("is not valid JSON",)),
    (b"[1, 2]", ("must be a JSON object ({...}), not an array",)),
    (b"null", ("must be a JSON object ({...}), not null",)),
    (b"7", ("must be a JSON object ({...}), not a number",)),
    (b"\xff\xfe", ("cannot read",)),
])
def test_bad_details_file_is_one_line_and_posts_nothing(
    capsys: Capture, url: str, tmp_path: Path, content: bytes | None, fragments: tuple[str, ...],
) -> None:
    path = tmp_path / "details.json"
    if content is not None:
        path.write_bytes(content)
    status, out, err = run(capsys, "--board", url, "post", "resize", "--details", f"@{path}")
    assert (status, out) == (1, "")
    assert_one_line_error(err, str(path), *fragments)
    assert table(run(capsys, "--board", url, "list")[1]) == [
        ["id", "name", "priority", "state", "owner", "attempts", "last_error"]]


def jobboard(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobboard", *argv], capture_output=True, text=True,
                          timeout=60, check=False)


@contextmanager
def started(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m jobboard ARGV`` running in the background (its output piped, as text); killed if it is
    still running when the ``with`` ends."""
    child = subprocess.Popen([sys.executable, "-m", "jobboard", *argv],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_check_exit_statuses_are_distinct_and_in_the_help() -> None:
    with refused_port() as port:
        results = {
            "no worker": jobboard("check", "memory://nobody"),
            "unreachable": jobboard("check", f"zookeeper://127.0.0.1:{port}/cli-edges?connect_timeout=1"),
            "no backend": jobboard("check", "nosuch://x"),
            "usage": jobboard("check", "--no-such-option"),
            "help": jobboard("--help"),
        }
    assert {what: result.returncode for what, result in results.items()} == {
        "no worker": 1, "unreachable": 3, "no backend": 3, "usage": 2, "help": 0}
    for what in ("unreachable", "no backend"):  # a warning may say why before the error
        assert results[what].stderr.splitlines()[-1].startswith("jobboard: error: ")
        assert results[what].stderr.count("jobboard: error: ") == 1, results[what].stderr
    assert "exit statuses:" in results["help"].stdout
    assert "3  the board is unreachable" in results["help"].stdout


@pytest.mark.parametrize(("host", "cause"), [
    ("127.0.0.1:{refused}", "connection refused"),
    ("no-such-host.invalid:2181", "host name not resolved"),
], ids=["refused", "unresolved"])
def test_unreachable_zookeeper_says_why_at_once_and_at_the_end(host: str, cause: str) -> None:
    with refused_port() as port:
        host = host.format(refused=port)
        result = jobboard("check", f"zookeeper://{host}/cli-edges?connect_timeout=1")
    assert result.returncode == 3
    warning, error = result.stderr.splitlines()
    assert warning.startswith(f"jobboard: WARNING: cannot connect to ZooKeeper at {host}: {cause}")
    assert warning.endswith("; retrying")
    assert error.startswith(f"jobboard: error: no ZooKeeper server reachable within 1.0s: {host}: {cause}")
    assert "TimeoutError" not in result.stderr


def test_out_of_range_zookeeper_port_is_a_bad_url() -> None:
    result = jobboard("check", "zookeeper://127.0.0.1:99999/cli-edges?connect_timeout=1")
    assert result.returncode == 2  # a usage error: 1 would say "no live worker"
    assert result.stderr.startswith("jobboard: error: bad port in host '127.0.0.1:99999'")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", [["list"], ["stats"], ["show", "job-0000000001"], ["trashed"]])
def test_a_read_command_on_a_sqlite_board_that_does_not_exist_says_so_and_creates_nothing(
        capsys: Capture, tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nowhere" / "jobs.db"
    status, _, err = run(capsys, "--board", f"sqlite://{missing}?board=shop", *command)
    assert status == 3 and "does not exist" in err
    assert_one_line_error(err)
    assert not (tmp_path / "nowhere").exists()


def test_a_limit_set_before_the_first_post_creates_the_sqlite_board(capsys: Capture, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'fresh' / 'jobs.db'}?board=shop"
    status, _, err = run(capsys, "--board", url, "limit", "tenant-42", "--concurrency", "2")
    assert status == 0, err
    status, _, err = run(capsys, "--board", url, "pause", "resize")
    assert status == 0, err
    status, out, _ = run(capsys, "--board", url, "limit")
    assert status == 0 and "tenant-42" in out


def test_a_post_creates_the_sqlite_board_a_read_command_then_finds(capsys: Capture, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'new' / 'jobs.db'}?board=shop"
    job_id = post(capsys, url, "resize")
    status, out, _ = run(capsys, "--board", url, "list")
    assert status == 0 and job_id in out
