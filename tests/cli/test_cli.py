"""The ``jobboard`` command line, driven through ``main([...])`` on ``memory://`` boards.

``memory://NAME`` boards share their store within a process, so one ``main``
call can post and the next list. Tests that hold a claim while the CLI runs
call ``main`` in a worker thread (it starts its own event loop).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from jobboard import JobState, open_board
from jobboard.cli import main
from jobboard.cli.jobs import DEFAULT_TRASH_REASON
from jobboard.cli.output import format_table

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def url() -> str:
    return f"memory://cli-{uuid.uuid4().hex}"


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` and what it printed."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def post(capsys: Capture, url: str, *argv: str) -> str:
    status, out, err = run(capsys, "--board", url, "post", *argv)
    assert (status, err) == (0, "")
    return out.strip()


def table(out: str) -> list[list[str]]:
    """A printed table as rows of whitespace-split cells (header first)."""
    return [line.split() for line in out.splitlines()]


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert err.startswith("jobboard: error: ")
    assert err.count("\n") == 1 and err.endswith("\n")
    for fragment in fragments:
        assert fragment in err


def test_post_then_list_shows_the_job_in_columns(capsys: Capture, url: str) -> None:
    first = post(capsys, url, "resize", "--details", '{"image": "a.png"}')
    urgent = post(capsys, url, "report", "--priority", "HIGH", "--max-attempts", "3")
    status, out, _ = run(capsys, "--board", url, "list")
    assert status == 0
    assert table(out) == [
        ["id", "name", "priority", "state", "owner", "attempts", "last_error"],
        [urgent, "report", "high", "unclaimed", "-", "0/3", "-"],
        [first, "resize", "normal", "unclaimed", "-", "0", "-"],
    ]
    header, row = out.splitlines()[:2]
    assert header.index("name") == row.index("report")


def test_post_with_a_key_twice_posts_once(capsys: Capture, url: str) -> None:
    first = post(capsys, url, "charge", "--details", '{"order": 42}', "--key", "order-42")
    again = post(capsys, url, "charge", "--details", '{"order": 42}', "--key", "order-42")
    assert again == first
    _, out, _ = run(capsys, "--board", url, "list")
    assert [row[0] for row in table(out)[1:]] == [first]


def test_a_keyed_post_that_finds_another_job_of_its_key_says_so(capsys: Capture, url: str) -> None:
    first = post(capsys, url, "charge", "--details", '{"order": 42}', "--key", "order-42")
    status, out, err = run(capsys, "--board", url, "post", "refund", "--details", '{"order": 42}', "--key", "order-42")
    assert (status, out.strip()) == (0, first)  # the id on stdout, as a script reads it
    assert f"key 'order-42' already names {first} (charge" in err and "nothing new was posted" in err
    status, _, err = run(capsys, "--board", url, "post", "charge", "--details", '{"order": 42}', "--key", "order-42")
    assert (status, err) == (0, "")  # the same post again: idempotent, nothing to say


def test_list_json_has_all_fields(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize", "--details", '{"size": 128}', "--priority", "-1")
    status, out, _ = run(capsys, "--board", url, "list", "--json")
    assert status == 0
    [record] = json.loads(out)
    assert record["id"] == job_id and record["details"] == {"size": 128}
    assert (record["priority"], record["state"], record["owner"]) == ("low", "unclaimed", None)


def test_list_of_an_empty_board_prints_the_header(capsys: Capture, url: str) -> None:
    status, out, _ = run(capsys, "--board", url, "list")
    assert (status, table(out)) == (0, [["id", "name", "priority", "state", "owner", "attempts", "last_error"]])


def test_post_after_makes_a_waiting_job_that_unclaimed_hides(capsys: Capture, url: str) -> None:
    first = post(capsys, url, "a")
    second = post(capsys, url, "b")
    report = post(capsys, url, "report", "--after", first, second)
    _, out, _ = run(capsys, "--board", url, "list")
    assert [row[0] for row in table(out)[1:]] == [first, second, report]
    assert table(out)[3][3] == "waiting"
    _, out, _ = run(capsys, "--board", url, "list", "--unclaimed")
    assert [row[0] for row in table(out)[1:]] == [first, second]


async def test_list_shows_the_owner_and_unclaimed_hides_claimed_jobs(url: str) -> None:
    with anyio.fail_after(10):
        async with open_board(url) as board:
            claimed = await board.post("held")
            free = await board.post("free")
            await board.claim(claimed, "worker-7")
            rows = await anyio.to_thread.run_sync(cli_rows, url, "list")
            unclaimed = await anyio.to_thread.run_sync(cli_rows, url, "list", "--unclaimed")
    assert rows[1] == [claimed.id, "held", "normal", "claimed", "worker-7", "1", "-"]
    assert rows[2][:5] == [free.id, "free", "normal", "unclaimed", "-"]
    assert [row[0] for row in unclaimed[1:]] == [free.id]


def cli_rows(url: str, *argv: str) -> list[list[str]]:
    """Run the CLI (in a worker thread) capturing stdout through a temporary redirect."""
    buffer = StringIO()
    with redirect_stdout(buffer):
        assert main(["--board", url, *argv]) == 0
    return table(buffer.getvalue())


async def test_trash_of_a_claimed_job_revokes_the_claim_without_counting_an_attempt(url: str) -> None:
    with anyio.fail_after(10):
        async with open_board(url) as board:
            job = await board.post("held")
            await board.claim(job, "worker-7")
            status = await anyio.to_thread.run_sync(main, ["--board", url, "trash", job.id])
            assert status == 0
            assert await board.state(job) is JobState.TRASHED
            [item] = [item async for item in board.trashed()]
            assert item.job.attempts == 1  # worker-7's claim only


def test_show_prints_every_field_state_and_owner(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize", "--details", '{"image": "a.png"}', "--max-attempts", "2")
    status, out, _ = run(capsys, "--board", url, "show", job_id)
    assert status == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["id:"] == job_id and fields["name:"] == "resize"
    assert fields["state:"] == "unclaimed" and fields["owner:"] == "-"
    assert json.loads(fields["details:"]) == {"image": "a.png"}
    assert fields["max_attempts:"] == "2" and fields["priority:"] == "normal"
    assert {"sequence:", "created_at:", "depends_on:", "attempts:", "not_before:", "keep_result:"} <= set(fields)


def test_show_json(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "resize", "--details", '{"tags": ["x", 1]}')
    status, out, _ = run(capsys, "--board", url, "show", job_id, "--json")
    record = json.loads(out)
    assert status == 0
    assert record["id"] == job_id and record["details"] == {"tags": ["x", 1]}
    assert (record["state"], record["owner"], record["depends_on"]) == ("unclaimed", None, [])
    assert isinstance(record["created_at"], float)


def test_trash_then_trashed_lists_the_reason_and_list_drops_it(capsys: Capture, url: str) -> None:
    kept = post(capsys, url, "keep")
    doomed = post(capsys, url, "doomed")
    status, out, _ = run(capsys, "--board", url, "trash", doomed, "--reason", "bad input file")
    assert status == 0 and doomed in out
    _, out, _ = run(capsys, "--board", url, "trashed")
    rows = out.splitlines()
    assert rows[0].split() == ["id", "name", "trashed_at", "reason"]
    assert len(rows) == 2 and rows[1].startswith(doomed) and rows[1].endswith("bad input file")
    _, out, _ = run(capsys, "--board", url, "list")
    assert [row[0] for row in table(out)[1:]] == [kept]


def test_trash_default_reason_and_show_of_a_trashed_job(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "doomed")
    assert run(capsys, "--board", url, "trash", job_id)[0] == 0
    status, out, _ = run(capsys, "--board", url, "show", job_id, "--json")
    record = json.loads(out)
    assert status == 0
    assert (record["state"], record["trash_reason"]) == (JobState.TRASHED.value, DEFAULT_TRASH_REASON)


def test_board_defaults_to_the_environment(
    capsys: Capture, url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBBOARD_URL", url)
    job_id = post(capsys, url, "from-flag")
    status, out, _ = run(capsys, "list")
    assert status == 0 and table(out)[1][0] == job_id


def test_board_option_is_also_accepted_after_the_command(capsys: Capture, url: str) -> None:
    job_id = post(capsys, url, "x")
    status, out, _ = run(capsys, "list", "--board", url)
    assert status == 0 and table(out)[1][0] == job_id


def test_without_a_board_the_cli_uses_the_default_file_board_and_says_which(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Issue 26: no --board and no $JOBBOARD_URL: one sqlite:// file board in the user's data directory,
    named on stderr with both ways to choose another; two commands (two terminals) share it."""
    monkeypatch.delenv("JOBBOARD_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    status, out, err = run(capsys, "post", "resize", "--details", '{"url": "a.png"}')
    job_id = out.strip()
    assert status == 0 and job_id, err
    board_file = tmp_path / "jobboard" / "jobs.db"
    assert board_file.is_file() and f"sqlite://{board_file}" in err and "--board" in err and "JOBBOARD_URL" in err
    status, out, err = run(capsys, "list")
    assert status == 0 and table(out)[1][0] == job_id and err.count("using the default board") == 1


def test_an_unusable_default_board_directory_is_a_usage_error_naming_both_ways(
    capsys: Capture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.delenv("JOBBOARD_URL", raising=False)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    status, out, err = run(capsys, "list")
    assert (status, out) == (2, "")
    assert "--board" in err and "JOBBOARD_URL" in err and len(err.strip().splitlines()) <= 2


def test_unknown_scheme_is_one_line_naming_installed_schemes(capsys: Capture) -> None:
    status, out, err = run(capsys, "--board", "nosuch://x", "list")
    assert (status, out) == (3, "")
    assert_one_line_error(err, "nosuch://", "memory", "zookeeper")


@pytest.mark.parametrize("details", ["{not json", "[1, 2]", '"text"'])
def test_bad_json_details_exit_1_and_post_nothing(capsys: Capture, url: str, details: str) -> None:
    status, out, err = run(capsys, "--board", url, "post", "x", "--details", details)
    assert (status, out) == (1, "")
    assert_one_line_error(err, "--details")
    assert len(table(run(capsys, "--board", url, "list")[1])) == 1


def test_show_of_an_id_not_on_the_board_says_consumed_and_that_it_cannot_tell(capsys: Capture, url: str) -> None:
    """A board keeps nothing of a consumed job (but a kept result): such an id shows as complete
    with a note saying so, not as an error; an id past the last one the board gave is an error."""
    async def consumed_job() -> str:
        with anyio.fail_after(5):
            async with open_board(url) as board:
                job = await board.post("x")
                await board.consume(await board.claim(job, "w1"))
                return job.id

    consumed = anyio.run(consumed_job)
    status, out, err = run(capsys, "--board", url, "show", consumed)
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert (status, err, fields["id:"], fields["state:"], fields["result:"]) == (0, "", consumed, "complete", "-")
    assert "consumed" in fields["note:"] and "never posted" in fields["note:"]
    status, out, err = run(capsys, "--board", url, "show", "job-0000000404")
    assert (status, out) == (1, "") and "was ever posted" in err


def test_board_rejection_of_a_post_is_one_line(capsys: Capture, url: str) -> None:
    status, _, err = run(capsys, "--board", url, "post", "x", "--after", "job-missing")
    assert status == 1
    assert_one_line_error(err, "job-missing")


def test_bad_priority_is_a_usage_error_listing_names(capsys: Capture, url: str) -> None:
    status, _, err = run(capsys, "--board", url, "post", "x", "--priority", "urgent")
    assert status == 2 and "very_high" in err


def test_no_command_is_a_usage_error(capsys: Capture) -> None:
    status, _, err = run(capsys, "--board", "memory://x")
    assert status == 2 and "usage:" in err


def test_help_exits_0(capsys: Capture) -> None:
    status, out, _ = run(capsys, "--help")
    assert status == 0
    assert all(name in out for name in ("post", "list", "show", "trash", "trashed", "demo"))


def test_demo_calls_the_demo_module(capsys: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobboard.demo

    calls: list[str] = []

    def fake_demo() -> int:
        calls.append("demo")
        return 3

    monkeypatch.setattr(jobboard.demo, "main", fake_demo)
    assert run(capsys, "demo")[0] == 3
    assert calls == ["demo"]


def test_format_table_aligns_columns_without_trailing_blanks() -> None:
    text = format_table(("id", "reason"), [("job-1", "long reason"), ("j2", "-")])
    assert text.splitlines() == ["id     reason", "job-1  long reason", "j2     -"]


def test_python_dash_m_jobboard_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobboard", "--board", "memory://x", "list"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["id", "name", "priority", "state", "owner", "attempts", "last_error"]


def test_demo_refuses_a_board_it_would_not_use(capsys: Capture) -> None:
    status, out, err = run(capsys, "--board", "redis://127.0.0.1:1/0/demo", "demo")
    assert (status, out) == (2, "")
    assert err.startswith("jobboard: error: the demo runs on its own board") and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "message"), [
    (("post", "a", "--max-attempts", "0"), "argument --max-attempts: must be 1 or more, not 0"),
    (("worker", "--handlers", "x:y", "--grace-period", "-1"), "argument --grace-period: seconds must be"),
    (("worker", "--handlers", "x:y", "--max-attempts", "-2"), "argument --max-attempts: must be 0 or more"),
])
def test_out_of_range_counts_and_durations_are_usage_errors(capsys: Capture, url: str, argv: tuple[str, ...],
                                                            message: str) -> None:
    status, out, err = run(capsys, "--board", url, *argv)
    assert (status, out) == (2, "") and message in err
