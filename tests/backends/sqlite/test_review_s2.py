"""Second review of the ``sqlite://`` fixes (findings G<n>): bugs as strict xfails, guarantees that hold as plain
tests. Each case bounded, a few seconds, real processes and files."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BoardConflict
from jobboard_sqlite import files
from tests.backends.sqlite.test_review_s import spawn
from tests.backends.sqlite.test_schema_upgrade import OLDER_PROCESS, as_version_2, user_version

pytestmark = pytest.mark.timeout(60)

OWNER = r"""
import fcntl, os, sys, time
from jobboard_sqlite import files
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, files.HEADER.pack(time.monotonic() - 10, 0.5) + files.OWNER.pack(*files.identity()), 0)
print("ready", flush=True)
time.sleep(60)
"""
"""A session's owner as SessionLock.acquire leaves it, its heartbeat 10 s old (silent)."""


async def test_an_upgrade_sees_an_older_process_whose_stored_lock_path_is_another_view(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite://{path}?board=b"
    async with open_board(url) as board:
        await board.post("w")
    as_version_2(path)
    lock_dir = files.sessions_dir(path)
    lock_dir.mkdir(exist_ok=True)
    # The older process holds <db>-jobboard/older.lock but stored it as seen in its container: /data/...
    script = OLDER_PROCESS.replace("(os.getpid(), time.time(), lock)",
                                   "(os.getpid(), time.time(), '/data/jobs.db-jobboard/older.lock')")
    older = await spawn(script, str(path), str(lock_dir / "older.lock"))
    try:
        with pytest.raises(BoardConflict, match="is open in 1 process"):
            async with open_board(url):
                pass
        assert user_version(path) == 2
    finally:
        older.kill()
        with anyio.fail_after(20):
            await older.wait()


@contextmanager
def owner_of(lock: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process holding ``lock`` as a session's owner does (``ready`` read), killed and waited for after."""
    child = subprocess.Popen([sys.executable, "-c", OWNER, str(lock)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def until_state(pid: int, state: str) -> None:
    """Wait (10 s at most) until ``/proc`` shows ``pid`` in ``state`` (``Z``, ``T`` ...) or gone."""
    deadline = time.monotonic() + 10
    while (found := files.process_state(pid)) is not None and found[0] != state:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_sigkilled_owner_not_yet_reaped_is_dead_at_once(tmp_path: Path) -> None:
    """A zombie (its parent has not waited for it) holds no flock: its session is dead, no 60 s wait."""
    lock = tmp_path / "s.lock"
    with owner_of(lock) as child:
        os.kill(child.pid, signal.SIGKILL)
        until_state(child.pid, "Z")
        dead, fd = files.probe(lock, 0.5)
        assert dead and fd >= 0
        os.close(fd)


def test_a_running_owner_silent_past_its_timeout_is_kept_and_a_stopped_one_is_not(tmp_path: Path) -> None:
    lock = tmp_path / "s.lock"
    with owner_of(lock) as child:
        assert files.probe(lock, 0.5) == (False, -1)  # running (sleeping): silent 10 s < HUNG_AFTER, kept
        os.kill(child.pid, signal.SIGSTOP)
        until_state(child.pid, "T")
        assert files.probe(lock, 0.5) == (True, -1)  # stopped: ended (the caller cleans up)


def test_a_lock_file_being_born_is_not_taken_for_dead(tmp_path: Path) -> None:
    """Between O_CREAT and the first write the file is empty but held: alive (its beat is 'inf')."""
    lock = tmp_path / "s.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert files.probe(lock, 0.01) == (False, -1)
        assert lock.exists()
    finally:
        os.close(fd)


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(not (FREEZER / "cgroup.procs").exists() or os.geteuid() != 0, reason="needs a v1 freezer, root")
def test_a_frozen_owner_is_taken_for_stopped(tmp_path: Path) -> None:
    lock = tmp_path / "s.lock"
    group = FREEZER / f"jobboard-rs2-{os.getpid()}"
    group.mkdir()
    try:
        with owner_of(lock) as child:
            try:
                (group / "cgroup.procs").write_text(str(child.pid))
                (group / "freezer.state").write_text("FROZEN")
                deadline = time.monotonic() + 10
                while (group / "freezer.state").read_text().strip() != "FROZEN":
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
                assert files.probe(lock, 0.5) == (True, -1)  # silent 10 s, timeout 0.5, frozen: as good as stopped
            finally:
                (group / "freezer.state").write_text("THAWED")
    finally:
        group.rmdir()


async def test_a_read_on_a_file_upgraded_under_it_fails_as_a_write_does(tmp_path: Path) -> None:
    import sqlite3

    from jobboard_sqlite.schema import SCHEMA_VERSION

    path = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{path}?board=b") as board:
        job = await board.post("w")
        with sqlite3.connect(path, isolation_level=None) as conn:  # a newer jobboard upgraded the file
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        try:
            with anyio.fail_after(10), pytest.raises(BoardConflict, match="changed to schema version"):
                await board.get(job.id)
        finally:
            with sqlite3.connect(path, isolation_level=None) as conn:
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


OPENER = r"""
import asyncio, sys
from jobboard import open_board
async def main() -> None:
    async with open_board(f"sqlite://{sys.argv[1]}?board=b") as board:
        await board.post("w")
asyncio.run(main())
"""


def test_six_processes_creating_one_file_all_open_it(tmp_path: Path) -> None:
    """F1's refusal of foreign files never refuses a board another process is creating (its tables, its version and
    its jb_board are written in one transaction), nor the 0-byte file another just created."""
    path = tmp_path / "jobs.db"
    children = [subprocess.Popen([sys.executable, "-c", OPENER, str(path)], stderr=subprocess.PIPE)
                for _ in range(6)]
    errors = [child.communicate(timeout=40)[1].decode() for child in children]
    assert [child.returncode for child in children] == [0] * 6, errors
    path.with_name("empty.db").touch()
    asyncio.run(_post_once(path.with_name("empty.db")))


async def _post_once(path: Path) -> None:
    async with open_board(f"sqlite://{path}?board=b") as board:
        await board.post("w")
        assert await board.job_count() == 1


HIDDEN_PROBE = ("mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid=65534 --regid=65534 --clear-groups "
                "{python} -c 'import sys; from pathlib import Path; from jobboard_sqlite import files; "
                "print(files.probe(Path(sys.argv[1]), 0.5)[0])' {lock}")


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/unshare").exists(), reason="needs root and unshare")
def test_a_running_owner_hidden_by_hidepid_is_kept() -> None:
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="jobboard-rs2-"))  # pytest's tmp_path is root's own (0700): not nobody's
    where.chmod(0o755)
    lock = where / "s.lock"
    try:
        with owner_of(lock):
            assert files.probe(lock, 0.5) == (False, -1)  # root sees it running: kept
            script = HIDDEN_PROBE.format(python=sys.executable, lock=lock)
            seen = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=30, check=True)
            assert seen.stdout.strip() == b"False"  # nobody, under hidepid=2: kept too
    finally:
        shutil.rmtree(where)
