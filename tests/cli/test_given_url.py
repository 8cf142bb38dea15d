"""Messages and ``top``'s header show the board URL the user gave, not the ``create=0`` the CLI adds to it for
the commands that must not create a sqlite:// board."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobboard.cli.options import for_command
from tests.cli.test_cli import Capture, assert_one_line_error, run


def test_an_error_names_the_url_given(capsys: Capture) -> None:
    status, out, err = run(capsys, "list", "--board", "sqlite://")
    assert (status, out) == (2, "")
    assert_one_line_error(err, "'sqlite://' names no database file")
    assert "create=0" not in err


def test_top_shows_the_url_given(capsys: Capture, tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'board.db'}?poll_interval=1"
    assert run(capsys, "post", "resize", "--board", url)[0] == 0
    status, out, _ = run(capsys, "top", "--once", "--board", url)
    assert status == 0 and out.splitlines()[0].startswith(f"jobboard top: {url} at ")


@pytest.mark.parametrize("command", [("post", "x"), ("list",), ("worker", "--handlers", "docs.examples.worker:handlers")])
@pytest.mark.parametrize("query", ["board=t1?session_timeout=3", "board=t1?create=0", "board=shop?recreate=1"])
def test_a_query_typed_with_a_second_question_mark_is_refused_not_a_new_board(
        capsys: Capture, tmp_path: Path, command: tuple[str, ...], query: str) -> None:
    """``?board=t1?create=0`` (``?`` for ``&``) named a new board ``t1?create=0``: a post went there, unseen by a
    worker of ``t1``, and even ``list`` made it (the CLI saw ``create=`` in the text and added no ``create=0``).
    A board's name holds none of a URL's separators; the one-line error says how options are joined."""
    path = tmp_path / "jobs.db"
    status, out, err = run(capsys, *command[:1], "--board", f"sqlite://{path}?{query}", *command[1:])
    assert (status, out) == (2, "")
    assert_one_line_error(err, "bad value for option board=", "options are joined with &")
    assert not path.exists()


def test_read_commands_add_create_0_unless_the_query_has_the_option() -> None:
    assert for_command("list", "sqlite:///x.db?board=a") == "sqlite:///x.db?board=a&create=0"
    assert for_command("list", "sqlite:///x.db?board=a&create=1") == "sqlite:///x.db?board=a&create=1"
    assert for_command("list", "sqlite:///x.db?board=recreate") == "sqlite:///x.db?board=recreate&create=0"
    assert for_command("post", "sqlite:///x.db?board=a") == "sqlite:///x.db?board=a"
