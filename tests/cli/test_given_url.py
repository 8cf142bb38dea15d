"""Messages and ``top``'s header show the board URL the user gave, not the ``create=0`` the CLI adds to it for
the commands that must not create a sqlite:// board."""

from __future__ import annotations

from pathlib import Path

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
