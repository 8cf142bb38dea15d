"""sqlite:// and its file: a file that is not a database, a read-only file, a full disk, a network
filesystem, a forked child that must not keep its parent's claims alive."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.cli.options import default_board_url, for_command
from jobboard.errors import BackendUnavailable, BoardConflict
from jobboard.job import JobState
from jobboard_sqlite.files import filesystem_of, is_network_filesystem
from tests.backends.sqlite.test_processes import child, reap

pytestmark = pytest.mark.timeout(120)


async def test_a_file_that_is_not_a_database_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "jobs.db").write_bytes(b"this is a text file, not a database\n" * 200)
    with pytest.raises(BoardConflict) as caught:
        async with open_board(f"sqlite://{tmp_path}/jobs.db"):
            pass
    message = str(caught.value)
    assert "\n" not in message and "jobs.db is not a jobboard SQLite database" in message


async def test_a_read_only_file_is_refused_in_one_line() -> None:
    with tempfile.TemporaryDirectory() as directory:  # under /tmp, where another user may look
        os.chmod(directory, 0o755)
        await read_only_case(Path(directory))


async def read_only_case(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db"
    async with open_board(url) as board:
        await board.post("kept")
    result = post_as_another_user(tmp_path, url)
    assert result.returncode == 3, result.stderr[-2000:]
    line = result.stdout.strip()
    assert "\n" not in line and line.split()[0] in ("BoardConflict", "BackendUnavailable"), line
    assert "read-only" in line or "cannot" in line, line
    async with open_board(url) as board:
        assert [job.name async for job in board.iterjobs()] == ["kept"]


def post_as_another_user(directory: Path, url: str) -> subprocess.CompletedProcess[str]:
    """Post on ``url`` from a process that may not write ``directory``: as nobody when this is root (root
    writes any file), else after taking the write bits away. Exits 3 printing the error's type and text."""
    script = ("import asyncio, sys\nfrom jobboard import open_board\nasync def main():\n"
              f"    async with open_board({url!r}) as board:\n        await board.post('x')\n"
              "try:\n    asyncio.run(main())\nexcept Exception as error:\n"
              "    print(type(error).__name__, error); sys.exit(3)\n")
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", script]
    else:
        for path in directory.iterdir():
            path.chmod(0o444)
        directory.chmod(0o555)
        command = [sys.executable, "-c", script]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        directory.chmod(0o755)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs (skipped where this process may not mount one)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_fails_posts_in_one_line_and_loses_nothing(small_disk: Path) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 1024 * 1024)
    url = f"sqlite://{small_disk}/jobs.db"
    posted: list[str] = []
    async with open_board(url) as board:
        with pytest.raises(BackendUnavailable) as caught:
            for index in range(100000):
                job = await board.post("big", {"pad": "x" * 20000, "i": index})
                posted.append(job.id)
        assert "full" in str(caught.value) and "\n" not in str(caught.value)
        filler.unlink()  # room again: the board goes on
        posted.append((await board.post("after", {})).id)
        on_board = [job.id async for job in board.iterjobs()]
    assert on_board == posted, "every post that returned is on the board, no other"
    conn = sqlite3.connect(small_disk / "jobs.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_network_filesystems_are_told_apart() -> None:
    mountinfo = (
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        "40 22 0:35 / /srv/shared rw,relatime - nfs4 server:/export rw,vers=4.2\n"
        "41 40 0:36 / /srv/shared/local rw,relatime - ext4 /dev/sdb1 rw\n"
        "42 22 0:37 / /mnt/box rw,relatime - fuse.sshfs host:/ rw\n")
    assert filesystem_of(Path("/srv/shared/app/jobs.db"), mountinfo) == "nfs4"
    assert filesystem_of(Path("/srv/shared/local/jobs.db"), mountinfo) == "ext4"
    assert filesystem_of(Path("/srv/sharedother/jobs.db"), mountinfo) == "overlay"
    assert [is_network_filesystem(t) for t in ("nfs4", "ext4", "fuse.sshfs", "cifs", "overlay", "tmpfs")] == [
        True, False, True, True, False, False]


async def test_a_forked_child_does_not_keep_its_parents_claims(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=fork"
    async with open_board(url) as board:
        job = await board.post("a")
        proc, words = await child(url, "forkhold", 1)
        grandchild, held = int(words[0]), words[1:]
        try:
            assert held == [job.id]
            proc.send_signal(signal.SIGKILL)  # (not awaited: the grandchild still holds its stdout)
            started = time.monotonic()
            with anyio.fail_after(5):
                while (claim := await board.claim_next("survivor")) is None:
                    await board.wait()
            assert time.monotonic() - started < 2.0
            assert claim.job.id == job.id
        finally:
            os.kill(grandchild, signal.SIGKILL)
            await reap(proc)




def test_every_write_transaction_begins_immediate() -> None:
    """A deferred transaction that reads and then writes fails busy at once, without waiting: every
    transaction the package opens is ``BEGIN IMMEDIATE``, but the one of ``Database.read`` (reads only)."""
    package = Path(__file__).resolve().parents[3] / "backends" / "sqlite" / "jobboard_sqlite"
    begins = [(path.name, line.strip()) for path in sorted(package.glob("*.py"))
              for line in path.read_text().splitlines() if '"BEGIN' in line]
    deferred = [place for place in begins if '"BEGIN IMMEDIATE"' not in place[1]]
    assert deferred == [("database.py", 'conn.execute("BEGIN")')], deferred
    assert len(begins) >= 3


async def test_boards_of_one_file_keep_their_own_jobs(tmp_path: Path) -> None:
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=a") as a, \
            open_board(f"sqlite://{tmp_path}/jobs.db?board=b") as b, \
            open_board(f"sqlite://{tmp_path}/jobs.db") as default:
        first_a, first_b = await a.post("a1"), await b.post("b1")
        await default.post("d1")
        assert first_a.id == first_b.id == "job-0000000001"  # each board counts its own ids
        assert [job.name async for job in a.iterjobs()] == ["a1"]
        claim = await b.claim_next("w")
        assert claim is not None and claim.job.name == "b1"
        assert await b.claim_next("w") is None and await a.job_count() == 1
        await b.consume(claim)
        assert await a.state(first_a) is JobState.UNCLAIMED and [j.name async for j in default.iterjobs()] == ["d1"]


async def test_create_0_refuses_a_board_that_does_not_exist_in_one_line_and_makes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "jobs.db"
    with pytest.raises(BackendUnavailable) as caught:
        async with open_board(f"sqlite://{missing}?create=0"):
            pass
    assert "\n" not in str(caught.value) and f"no sqlite:// board at {missing}" in str(caught.value)
    assert not (tmp_path / "no").exists()
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=a") as made:
        job = await made.post("j")
    with pytest.raises(BackendUnavailable, match="no board 'b' in"):
        async with open_board(f"sqlite://{tmp_path}/jobs.db?board=b&create=0"):
            pass
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=a&create=0") as existing:
        assert [found.id async for found in existing.iterjobs()] == [job.id]
    async with open_board(f"sqlite://{tmp_path}/jobs.db?board=a") as made:
        assert [found.id async for found in made.iterjobs()] == [job.id]  # board b was not made
        assert made.backend.db.conn.execute("SELECT name FROM jb_board").fetchall() == [("a",)]  # type: ignore[attr-defined]


def test_the_cli_opens_boards_with_create_0_except_for_the_commands_that_post() -> None:
    assert for_command("list", "sqlite:///x/jobs.db") == "sqlite:///x/jobs.db?create=0"
    assert for_command("show", "sqlite:///x/jobs.db?board=b") == "sqlite:///x/jobs.db?board=b&create=0"
    assert for_command("list", "sqlite:///x/jobs.db?create=1") == "sqlite:///x/jobs.db?create=1"
    assert [for_command(name, "sqlite:///x/jobs.db") for name in ("post", "worker", "schedule")] == \
        ["sqlite:///x/jobs.db"] * 3
    assert for_command("list", "memory://x") == "memory://x"


def test_the_default_board_url_makes_nothing_and_refuses_a_file_in_the_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_board_url() == f"sqlite://{tmp_path}/data/jobboard/jobs.db"
    assert not (tmp_path / "data").exists()
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "file"))
    with pytest.raises(OSError, match="not a writable directory"):
        default_board_url()


async def test_a_post_waits_out_a_write_lock_held_for_seconds_and_then_succeeds(tmp_path: Path) -> None:
    """Another connection holds the file's write lock for 2.5 s (as a process stopped inside a write
    transaction does): the post retries until the lock is free and succeeds. Found by the fault schedule
    (seed 383228737): past ~1,000 busy retries the back-off computed ``0.0001 * 2 ** retries`` and raised
    ``OverflowError`` out of ``post``."""
    url = f"sqlite://{tmp_path / 'jobs.db'}?board=held"
    async with open_board(url) as board:
        await board.post("first")
        holder = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        released = threading.Timer(2.5, holder.execute, ["ROLLBACK"])
        released.start()
        try:
            with anyio.fail_after(30):
                started = time.monotonic()
                job = await board.post("second")
            assert time.monotonic() - started >= 2.0  # it really waited for the lock
            assert job.name == "second" and await board.job_count() == 2
        finally:
            released.join()
            holder.close()
