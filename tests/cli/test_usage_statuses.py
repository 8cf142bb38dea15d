"""Usage-like errors of the command line exit 2 (docs/cli.md's table), each with one error line; the library's
reserved ``jobboard.`` names are refused to users and still taken from the library itself."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import open_board
from tests.cli.test_cli import Capture, run


@pytest.fixture
def url() -> str:
    return f"memory://usage-{uuid.uuid4().hex}"


def error_line(err: str) -> str:
    """The one ``error:`` line of a refused command (argparse prints its usage above it)."""
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv", [
    ("post", "jobboard.schedule"),
    ("post", "jobboard.plan-gate", "--details", "{}"),
    ("schedule", "add", "beat", "jobboard.plan", "--every", "30"),
])
def test_a_reserved_job_name_is_a_usage_error_and_posts_nothing(capsys: Capture, url: str, argv: tuple[str, ...]) -> None:
    status, out, err = run(capsys, "--board", url, *argv)
    assert (status, out) == (2, "")
    assert "reserved" in error_line(err) and "'jobboard.'" in error_line(err)
    status, out, _ = run(capsys, "--board", url, "list", "--json")
    assert (status, out.strip()) == (0, "[]")


def test_the_library_still_posts_its_own_jobs(capsys: Capture, url: str) -> None:
    """``schedule add`` stores its ``jobboard.schedule`` record; the API (plans, the conformance suite) takes the prefix."""
    assert run(capsys, "--board", url, "schedule", "add", "beat", "ping", "--every", "30")[0] == 0
    status, out, _ = run(capsys, "--board", url, "schedule", "list")
    assert status == 0 and "beat" in out and "ping" in out

    async def post_internal() -> str:
        with anyio.fail_after(10):
            async with open_board(url) as board:
                return (await board.post("jobboard.bookkeeping")).name

    assert anyio.run(post_internal) == "jobboard.bookkeeping"


@pytest.mark.parametrize(("argv", "fragment"), [
    (("post", ""), "job name must be a non-empty string"),
    (("post", "x", "--group", ""), "group must be a non-empty"),
    (("post", "x", "--key", ""), "key must be a non-empty string"),
    (("post", "x", "--key", "k" * 201), "key is 201 characters, over the limit of 200"),
    (("limit", "g", "--sequence", "--concurrency", "2"), "concurrency 2 contradicts it"),
    (("schedule", "add", "bad name!", "ping", "--every", "5"), "schedule name 'bad name!'"),
])
def test_usage_like_errors_exit_2_and_change_nothing(
        capsys: Capture, url: str, argv: tuple[str, ...], fragment: str) -> None:
    status, out, err = run(capsys, "--board", url, *argv)
    assert (status, out) == (2, "")
    assert fragment in error_line(err)
    assert run(capsys, "--board", url, "list", "--json")[1].strip() == "[]"
    assert run(capsys, "--board", url, "limit", "--json")[1].strip() == "[]"


def test_a_condition_of_the_board_is_still_exit_1(capsys: Capture, url: str) -> None:
    """A dependency not on the board is no usage error: the same command may succeed on another board."""
    status, _, err = run(capsys, "--board", url, "post", "x", "--after", "job-0000000009")
    assert status == 1 and "is not on the board" in error_line(err)
