"""An adversarial review of sqlite:// with processes sharing one file (helper "review-sqlite", 2026-11-27).

Each ``xfail(strict=True)`` case shows a bug (its reason names it; the report is /tmp/helpers6/review-sqlite.md);
each plain case is a guarantee that held. Children are real processes (``python -c``), every wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import BackendUnavailable, BoardConflict
from tests.support.processes import sqlite_writable

pytestmark = pytest.mark.timeout(90)
T = TypeVar("T")


async def polled(check: Callable[[], Awaitable[T]], within: float, every: float = 0.05) -> T | None:
    """The first true value of ``check`` within ``within`` seconds (``None`` if none came)."""
    with anyio.move_on_after(within):
        while not (value := await check()):  # noqa: ASYNC110 - another process changes it: no event to wait on
            await anyio.sleep(every)
        return value
    return None


async def spawn(script: str, *args: str) -> asyncio.subprocess.Process:
    """A child ``python -c script args`` whose first line is ``ready`` (read here)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, *args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert await line(proc, 30) == "ready"
    return proc


async def line(proc: asyncio.subprocess.Process, within: float = 20) -> str:
    assert proc.stdout is not None
    with anyio.fail_after(within):
        return (await proc.stdout.readline()).decode().strip()


async def finish(proc: asyncio.subprocess.Process) -> str:
    """End a child (SIGKILL if still running) and return the rest of its output."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    with anyio.fail_after(20):
        out, _ = await proc.communicate()
    return out.decode()


# -- a file that is not a board ------------------------------------------------------------------------------


def another_apps_database(path: Path, user_version: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users(name) VALUES ('alice')")
    conn.execute(f"PRAGMA user_version={user_version}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("user_version", [0, 2, 7])
async def test_a_database_of_another_application_is_refused_and_left_unchanged(tmp_path: Path,
                                                                               user_version: int) -> None:
    path = tmp_path / "app.db"
    another_apps_database(path, user_version)
    with pytest.raises(BoardConflict):
        async with open_board(f"sqlite://{path}?board=b"):
            pass
    conn = sqlite3.connect(path)
    try:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert (tables, mode) == (["users"], "delete")


# -- a live owner keeps its claims ------------------------------------------------------------------------------

GIL_HOLDER = r"""
import asyncio, ctypes, sys
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        claim = await board.claim_next("child")
        print("ready", flush=True)
        # a C call that keeps the GIL for 4 s (as a backtracking regex, or json.loads of a big text, does)
        ctypes.PyDLL(None).usleep(4_000_000)
        try:
            await board.consume(claim)
            print("consumed", flush=True)
        except Exception as error:
            print(type(error).__name__, flush=True)

asyncio.run(main(sys.argv[1]))
"""


async def test_a_live_owner_holding_the_gil_past_the_session_timeout_keeps_its_claim(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=gil&session_timeout=0.5"
    async with open_board(url) as board:
        job = await board.post("slow")
        proc = await spawn(GIL_HOLDER, url)
        try:
            stolen = await polled(lambda: board.claim_next("thief"), 3.0)  # the child holds the GIL 4 s
            alive = proc.returncode is None
            assert alive
            assert stolen is None, f"{job.id} claimed by another process while its owner runs it"
            assert await line(proc) == "consumed"
        finally:
            await finish(proc)


CLAIMERS = r"""
import sys, anyio
from jobboard import open_board

async def main(url, claimers):
    async with open_board(url) as board:
        print("ready", flush=True)
        async def claimer(index):
            while True:
                claim = await board.claim_next(f"c{index}")
                if claim is None:
                    await anyio.sleep(0.01)
                    continue
                await board.consume(claim)
                print("consumed", claim.job.id, flush=True)
        async with anyio.create_task_group() as group:
            for index in range(claimers):
                group.start_soon(claimer, index)

anyio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def sessions_of(db: Path, pid: int) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [row[0] for row in conn.execute("SELECT id FROM jb_session WHERE pid=?", (pid,))]
    finally:
        conn.close()


async def gone(db: Path, pid: int) -> bool:
    return not sessions_of(db, pid)


def state_of(pid: int) -> str:
    """The state letter of process ``pid`` (``/proc/<pid>/stat`` field 3)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def stop_between_writes(proc: asyncio.subprocess.Process, db: Path) -> None:
    """SIGSTOP ``proc`` outside a write transaction of its own: one stopped inside holds SQLite's write lock, and
    every writer of the file waits for it, the reaper included (docs/backends/sqlite.md, the write turn). A busy
    ``BEGIN IMMEDIATE`` from here: continue it and try again."""
    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        while state_of(proc.pid) not in "Tt":  # noqa: ASYNC110 - another process's state: no event to wait on
            await anyio.sleep(0.01)
        if sqlite_writable(db):
            return
        proc.send_signal(signal.SIGCONT)
        await anyio.sleep(0.02)
    raise AssertionError("the child was stopped inside a write transaction 100 times")


async def test_a_process_resumed_after_its_session_timeout_starts_one_new_session(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=renew&session_timeout=0.5"
    async with open_board(url) as board:
        proc = await spawn(CLAIMERS, url, "8")
        try:
            assert len(sessions_of(db, proc.pid)) == 1
            await stop_between_writes(proc, db)
            assert await polled(lambda: gone(db, proc.pid), 10)  # ended by this board's upkeep
            proc.send_signal(signal.SIGCONT)
            job = await board.post("after")
            with anyio.fail_after(10):
                assert await line(proc) == f"consumed {job.id}"  # it goes on, with a new session
            await anyio.sleep(1.0)
            assert len(sessions_of(db, proc.pid)) == 1
            assert len(glob.glob(f"{db}-jobboard/*.lock")) == 2  # this board's and the child's one session
        finally:
            await finish(proc)


# -- what holds ----------------------------------------------------------------------------------------------------

WORKER = r"""
import sys, anyio
from jobboard import Handlers, Worker, WorkerConfig, open_board

handlers = Handlers()

@handlers.register("x")
async def x(ctx):
    print("ran", ctx.job.id, flush=True)

async def main(url):
    async with open_board(url) as board:
        print("ready", flush=True)
        await Worker(board, handlers, WorkerConfig(owner="w", concurrency=2)).run()
        print("worker returned", flush=True)

anyio.run(main, sys.argv[1])
"""


async def drained(board: JobBoard) -> bool:
    return await board.job_count() == 0


async def test_a_worker_outlives_a_foreign_writer_holding_the_file_past_busy_timeout(tmp_path: Path) -> None:
    """``database is locked`` for 3 s (busy_timeout 1 s) is retried by the worker process, never fatal."""
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=locked&busy_timeout=1"
    async with open_board(url) as board:
        proc = await spawn(WORKER, url)
        try:
            first = await board.post("x")
            assert await line(proc) == f"ran {first.id}"
            foreign = sqlite3.connect(db, isolation_level=None)
            try:
                foreign.execute("BEGIN IMMEDIATE")  # not a board: no write turn, SQLite's lock only
                await anyio.sleep(3.0)
                foreign.execute("COMMIT")
            finally:
                foreign.close()
            second = await board.post("x")
            assert await line(proc) == f"ran {second.id}"
            assert await polled(lambda: drained(board), 10)
            assert proc.returncode is None
        finally:
            await finish(proc)


# -- a full disk ---------------------------------------------------------------------------------------------------


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


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` to the last block; the filler's path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def unnamed_lock_files(db: Path) -> list[str]:
    """Session lock files that no session row names (nobody will ever probe nor remove them)."""
    conn = sqlite3.connect(db)
    try:
        named = {row[0] for row in conn.execute("SELECT lock_path FROM jb_session")}
    finally:
        conn.close()
    return sorted(set(glob.glob(f"{db}-jobboard/*.lock")) - named)


async def test_opening_a_board_on_a_full_disk_fails_in_one_line_and_leaves_no_lock_file(small_disk: Path) -> None:
    db = small_disk / "jobs.db"
    url = f"sqlite://{db}?board=full"
    async with open_board(url) as board:
        await board.post("x")
        filler = fill(small_disk)
        try:
            with pytest.raises(BackendUnavailable):
                async with open_board(url):
                    pass
            assert unnamed_lock_files(db) == []
        finally:
            filler.unlink()


# -- more that holds: keys, batches, permits, rates and wake-ups across processes ----------------------------------

SCRIPT = r"""
import sys, time, anyio
from jobboard import NewJob, open_board

async def keyed(board, arg):
    for index in range(int(arg)):
        job = await board.post("k", {"i": index}, key=f"key-{index}")
        print(f"key-{index}", job.id, flush=True)

async def batches(board, arg):
    while True:
        await board.post_many([NewJob("b", {"i": i}) for i in range(int(arg))])
        print("batch", flush=True)

async def hold(board, arg):
    while (claim := await board.claim_next("holder")) is None:
        await anyio.sleep(0.01)
    print("held", claim.job.id, flush=True)
    await anyio.sleep(60)

async def rated(board, arg):
    async def claimer(index):
        idle = 0
        while idle < 100:
            before = time.monotonic()
            claim = await board.claim_next(f"r{index}")
            if claim is None:
                idle += 1
                await anyio.sleep(0.01)
                continue
            idle = 0
            print("claimed", before, time.monotonic(), flush=True)
            await board.consume(claim)
    async with anyio.create_task_group() as group:
        for index in range(int(arg)):
            group.start_soon(claimer, index)
    print("done", flush=True)

async def waiter(board, arg):
    jobs = await board.wait()
    print("woke", time.monotonic(), jobs[0].id, flush=True)

async def main(url, mode, arg):
    async with open_board(url) as board:
        print("ready", flush=True)
        line = await anyio.to_thread.run_sync(sys.stdin.readline)  # "go": start together
        await globals()[mode](board, arg)

anyio.run(main, *sys.argv[1:4])
"""


async def go(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()


async def test_one_key_posted_by_three_processes_at_once_finds_one_job(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=keys"
    async with open_board(url) as board:
        procs = [await spawn(SCRIPT, url, "keyed", "40") for _ in range(3)]
        await go(procs)
        found: dict[str, set[str]] = {}
        for proc in procs:
            for row in (await finish_after_exit(proc)).split("\n"):
                if row:
                    key, job = row.split()
                    found.setdefault(key, set()).add(job)
        assert len(found) == 40 and all(len(jobs) == 1 for jobs in found.values()), found
        assert await board.job_count() == 40


async def finish_after_exit(proc: asyncio.subprocess.Process) -> str:
    with anyio.fail_after(30):
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    return out.decode()


async def test_a_poster_killed_amid_post_many_leaves_whole_batches(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=batches"
    told = 0
    for round_ in range(3):
        proc = await spawn(SCRIPT, url, "batches", "700")
        await go([proc])
        await anyio.sleep(0.3 + 0.17 * round_)
        proc.kill()
        told += (await finish(proc)).count("batch")
    async with open_board(url) as board:
        count = await board.job_count()
    assert count % 700 == 0, f"{count} jobs: a batch was cut"
    assert told * 700 <= count <= (told + 3) * 700


async def test_a_killed_holders_concurrency_permit_comes_back_to_another_process(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=permit"
    async with open_board(url) as board:
        await board.set_limit("g", concurrency=1)
        first, second = await board.post("p", group="g"), await board.post("p", group="g")
        proc = await spawn(SCRIPT, url, "hold", "")
        await go([proc])
        assert await line(proc) == f"held {first.id}"
        assert await board.claim_next("here") is None  # the group's one permit is the child's
        proc.kill()
        await finish(proc)
        claim = await polled(lambda: board.claim_next("here"), 5)
        assert claim is not None and claim.job.id in (first.id, second.id)
        assert await board.claim_next("here") is None  # still one at a time
        await board.consume(claim)


def definitely_over(spans: list[tuple[float, float]], count: int, period: float) -> bool:
    """Whether some ``count + 1`` claims surely fell in one ``period``: each was granted between its call's start and
    its return, so ``count + 1`` claims whose last return is less than ``period`` after their first start did."""
    spans = sorted(spans, key=lambda span: span[1])
    return any(spans[i + count][1] - min(start for start, _ in spans[i:i + count + 1]) < period
               for i in range(len(spans) - count))


async def test_a_rate_holds_across_three_processes(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=rate"
    async with open_board(url) as board:
        await board.set_limit("r", rate=(4, 0.5))
        await board.post_many([NewJob("r", group="r") for _ in range(24)])
        procs = [await spawn(SCRIPT, url, "rated", "2") for _ in range(3)]
        await go(procs)
        rows = [row.split() for proc in procs for row in (await finish_after_exit(proc)).split("\n")]
        spans = [(float(row[1]), float(row[2])) for row in rows if row and row[0] == "claimed"]
        assert len(spans) == 24
        assert not definitely_over(spans, 4, 0.5)
        # and the rate binds: grant 20 came at least 5 periods after grant 0
        assert max(end for _, end in spans) - min(start for start, _ in spans) >= 5 * 0.5


async def test_a_delayed_post_wakes_a_wait_in_another_process_when_due(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=delay&poll_interval=30"  # no fallback poll: the doorbell and due time
    async with open_board(url) as board:
        proc = await spawn(SCRIPT, url, "waiter", "")
        await go([proc])
        await anyio.sleep(0.5)  # it waits (marked)
        posted = time.monotonic()
        job = await board.post("later", delay=1.0)
        woke, woken_by = (await line(proc, 10)).split()[1:]
        assert woken_by == job.id
        assert 0.95 <= float(woke) - posted < 5.0
        await finish(proc)


# -- a cancelled call --------------------------------------------------------------------------------------------


async def test_a_post_whose_caller_was_cancelled_while_the_file_was_locked_is_not_applied_later(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    async with open_board(f"sqlite://{db}?board=cancel") as board:
        foreign = sqlite3.connect(db, isolation_level=None)
        try:
            foreign.execute("BEGIN IMMEDIATE")  # a writer that is not a board: the post meets SQLite's lock
            with pytest.raises(TimeoutError), anyio.fail_after(0.3):
                await board.post("x")
            await anyio.sleep(1.0)
            foreign.execute("COMMIT")
        finally:
            foreign.close()
        await anyio.sleep(0.3)
        assert await board.job_count() == 0, "the post its caller gave up on was applied afterwards"


# -- two users sharing a file ------------------------------------------------------------------------------------

AS_NOBODY = """
import asyncio, sys
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        claim = await board.claim_next("nobody")
        print("claimed", claim and claim.job.id)

try:
    asyncio.run(main(sys.argv[1]))
except Exception as error:
    print(type(error).__name__, error)
"""


def share(directory: Path) -> None:
    """The database, its -wal, -shm and -jobboard directory readable and writable by every user (as by a group)."""
    for path in directory.glob("jobs.db*"):
        path.chmod(0o777 if path.is_dir() else 0o666)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user (setpriv, root only)")
async def test_another_user_with_write_access_to_the_file_can_use_the_board() -> None:
    with tempfile.TemporaryDirectory() as directory:  # under /tmp, where another user may look
        os.chmod(directory, 0o777)
        url = f"sqlite://{directory}/jobs.db?board=users"
        async with open_board(url) as board:
            job = await board.post("x")
            share(Path(directory))
            result = await anyio.run_process(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", AS_NOBODY, url],
                check=False, cwd="/")
            assert result.stdout.decode().strip() == f"claimed {job.id}"


# -- the file replaced under running processes ----------------------------------------------------------------------


async def test_a_worker_does_not_stay_on_a_deleted_database_file(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=replaced"
    async with open_board(url) as board:
        proc = await spawn(WORKER, url)
        first = await board.post("x")
    try:
        assert await line(proc) == f"ran {first.id}"
        remove_database(db)  # "start afresh": rm jobs.db*, the worker still running
        async with open_board(url) as fresh:
            job = await fresh.post("x")
            ran = None
            with anyio.move_on_after(5):
                ran = await line(proc)
                if ran == "":  # its output ended: the worker stopped (its status is known once it is reaped)
                    await proc.wait()
            # either the worker follows the new file or it stops saying why; never silence
            assert ran == f"ran {job.id}" or proc.returncode not in (None, 0)
    finally:
        await finish(proc)


def remove_database(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()


# -- retention is the sweeping process's --------------------------------------------------------------------------

OPEN_AND_CLOSE = """
import sys, anyio
from jobboard import open_board

async def main(url):
    async with open_board(url):
        print("ready", flush=True)

anyio.run(main, sys.argv[1])
"""


async def test_a_key_kept_for_a_day_is_not_dropped_by_a_process_with_a_shorter_retention(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=retention"
    async with open_board(url) as board:  # key_retention: the default, a day
        job = await board.post("once", key="order-17")
        claim = await board.claim(job, "here")
        await board.consume(claim)
        await anyio.sleep(1.2)
        proc = await spawn(OPEN_AND_CLOSE, f"{url}&key_retention=1")  # its first upkeep sweeps
        await finish_after_exit(proc)
        again = await board.post("once", key="order-17")
        assert again.id == job.id, "the key no longer finds the job it settled a second ago"


# -- a cancel in one process stops the handler in another -------------------------------------------------------

LONG_HANDLER = r"""
import sys, time, anyio
from jobboard import Handlers, Worker, WorkerConfig, open_board

handlers = Handlers()

@handlers.register("long")
async def long(ctx):
    print("started", flush=True)
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        print("stopped", time.monotonic(), flush=True)
        raise

async def main(url):
    async with open_board(url) as board:
        print("ready", flush=True)
        await Worker(board, handlers, WorkerConfig(owner="w")).run()

anyio.run(main, sys.argv[1])
"""


async def test_a_cancel_in_one_process_stops_the_handler_in_another_through_its_doorbell(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=cancel&poll_interval=30"  # no fallback poll: the doorbell alone
    async with open_board(url) as board:
        proc = await spawn(LONG_HANDLER, url)
        try:
            job = await board.post("long")
            assert await line(proc) == "started"
            await board.cancel(job, "superseded")
            cancelled = time.monotonic()
            word, at = (await line(proc, 10)).split()
            assert word == "stopped" and float(at) - cancelled < 3.0
            assert (await board.wait_for_completion(job)).state.value == "trashed"
        finally:
            await finish(proc)


# -- session_timeout is judged by the prober's URL ------------------------------------------------------------------

HOLD_UNTIL_TOLD = r"""
import sys, anyio
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        claim = await board.claim_next("child")
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            await board.consume(claim)
            print("consumed", flush=True)
        except Exception as error:
            print(type(error).__name__, flush=True)

anyio.run(main, sys.argv[1])
"""


async def test_a_board_with_a_shorter_session_timeout_does_not_take_live_sessions_for_stopped(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=timeouts"
    async with open_board(url) as board:  # session_timeout: the default, 5 s
        job = await board.post("x")
        proc = await spawn(HOLD_UNTIL_TOLD, url)
    try:
        async with open_board(f"{url}&session_timeout=0.5") as impatient:  # a dashboard, a script, a test
            stolen = await polled(lambda: impatient.claim_next("impatient"), 3.0)
            assert stolen is None, f"{job.id} taken from a live owner"
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        assert await line(proc) == "consumed"
    finally:
        await finish(proc)


# -- a close cut short -------------------------------------------------------------------------------------------


def open_files_under(directory: Path) -> list[str]:
    """The descriptors of this process open on files under ``directory``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory)):
                found.append(target)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
async def test_a_close_cut_short_by_a_cancel_scope_leaves_no_descriptor_behind(tmp_path: Path) -> None:
    for _ in range(3):
        manager = open_board(f"sqlite://{tmp_path}/jobs.db?board=close")
        board = await manager.__aenter__()
        await board.post("x")
        with anyio.move_on_after(0):  # a caller's deadline that has passed
            await manager.__aexit__(None, None, None)
        await anyio.sleep(0.3)
    assert open_files_under(tmp_path) == []


# -- more that holds: a fresh file opened by many processes at once, a holder of the write turn stopped --------------

FIRST_POST = r"""
import sys, anyio
from jobboard import open_board

async def main(url):
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    async with open_board(url) as board:
        print((await board.post("x")).id, flush=True)

anyio.run(main, sys.argv[1])
"""


async def test_six_processes_making_the_same_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/new/jobs.db?board=fresh"  # neither the directory nor the file exists
    procs = [await spawn(FIRST_POST, url) for _ in range(6)]
    await go(procs)
    ids = [(await finish_after_exit(proc)).strip() for proc in procs]
    assert sorted(ids) == [f"job-{n:010d}" for n in range(1, 7)]


TURN_HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)  # what a process stopped (SIGSTOP) between two transactions looks like
print("ready", flush=True)
time.sleep(60)
"""


async def test_writes_go_on_while_another_process_sits_on_the_write_turn(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=turn"
    async with open_board(url) as board:
        await board.post("before")
        proc = await spawn(TURN_HOLDER, f"{tmp_path}/jobs.db-jobboard/write.turn")
        try:
            started = time.monotonic()
            with anyio.fail_after(10):
                for index in range(50):
                    await board.post("during", {"i": index})
            took = time.monotonic() - started
            print(f"50 posts while the turn was held: {took:.2f} s")
            assert took < 5.0, took  # 0.5 s of patience, then SQLite's lock alone: not 0.5 s a write
            assert await board.job_count() == 51
        finally:
            await finish(proc)


# -- a worker's entity after its session was renewed ------------------------------------------------------------


async def entity_names(board: JobBoard) -> list[str]:
    return [entity.name for entity in await board.entities()]


async def ran(proc: asyncio.subprocess.Process, job_id: str) -> bool:
    """Read the child's lines until it ran ``job_id`` (an earlier job may run again after a stop)."""
    while (said := await line(proc)) != f"ran {job_id}":
        assert said.startswith("ran "), said
    return True


async def test_a_workers_entity_is_back_once_its_process_resumed_with_a_new_session(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=entity&session_timeout=0.5"
    async with open_board(url) as board:
        proc = await spawn(WORKER, url)
        try:
            assert await polled(lambda: entity_names(board), 10) == ["w"]
            await stop_between_writes(proc, db)
            assert await polled(lambda: gone(db, proc.pid), 10)
            proc.send_signal(signal.SIGCONT)
            job = await board.post("x")
            assert await ran(proc, job.id)  # it works again, under a new session
            assert await polled(lambda: entity_names(board), 3) == ["w"]
        finally:
            await finish(proc)


# -- the file's growth -----------------------------------------------------------------------------------------------


def grant_rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM jb_grant").fetchone()[0])
    finally:
        conn.close()


async def test_the_grants_of_cleared_rate_limits_are_swept_once_their_period_is_over(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    url = f"sqlite://{db}?board=grants"
    async with open_board(url) as board:
        for tenant in range(20):
            group = f"tenant-{tenant}"
            await board.set_limit(group, rate=(5, 0.05))
            await board.post_many([NewJob("x", group=group) for _ in range(5)])
            while (claim := await board.claim_next("w")) is not None:
                await board.consume(claim)
            await board.clear_limit(group)
    assert grant_rows(db) == 120  # 5 grants a group, and its cleared rate's period (slot -1) until they are swept
    await anyio.sleep(0.2)  # every period is over
    async with open_board(url):  # a board's first upkeep sweeps
        pass
    assert grant_rows(db) == 0


# -- the same file seen under two paths (a container's volume, a bind mount) ----------------------------------------

ELSEWHERE = ('mount --bind "$2" "$3" && mount -t tmpfs tmpfs "$2" && exec "$4" -c "$0" "$1"')
"""(sh -c, in a mount namespace of its own) Show directory $2 at $3 only, then run the script $0 with the URL $1."""

HOLD_AND_SLEEP = r"""
import sys, anyio
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        while (claim := await board.claim_next("child")) is None:
            await anyio.sleep(0.01)
        print("ready", flush=True)
        await anyio.sleep(60)

anyio.run(main, sys.argv[1])
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare -m")
async def test_a_process_seeing_the_file_under_another_path_does_not_take_live_sessions_for_dead(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    async with open_board(f"sqlite://{here}/jobs.db?board=views") as board:
        job = await board.post("x")
        proc = await asyncio.create_subprocess_exec(
            "unshare", "-m", "--propagation", "private", "sh", "-c", ELSEWHERE, HOLD_AND_SLEEP,
            f"sqlite://{there}/jobs.db?board=views", str(here), str(there), sys.executable,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        try:
            assert await line(proc, 30) == "ready"
            assert await board.owner(job) == "child"
            stolen = await polled(lambda: board.claim_next("here"), 2.0)
            assert stolen is None, f"{job.id} taken from a live owner that sees the file at {there}"
        finally:
            await finish(proc)


# -- an event reader in another process that falls behind the log ---------------------------------------------------

SLOW_READER = r"""
import asyncio, sys, time
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        events = board.events(maxlen=100_000)  # room for every event: only the file's log can lose any
        await asyncio.sleep(1.0)  # the other process logs its events from its next upkeep
        print("ready", flush=True)
        time.sleep(4)  # a long synchronous step: the event tail does not read meanwhile
        kinds = {}
        while True:
            try:
                event = await asyncio.wait_for(anext(events), 2)
            except TimeoutError:
                break
            kinds[event.kind.name] = kinds.get(event.kind.name, 0) + 1
        print(" ".join(f"{kind}={count}" for kind, count in sorted(kinds.items())), flush=True)

asyncio.run(main(sys.argv[1]))
"""


async def test_a_reader_that_falls_behind_the_files_event_log_is_told_it_lost_events(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/jobs.db?board=events"
    async with open_board(url) as board:
        proc = await spawn(SLOW_READER, url)
        try:
            await anyio.sleep(0.6)  # this board's upkeep sees the subscription: it logs from now on
            for _ in range(25):
                await board.post_many([NewJob("x") for _ in range(1000)])
            async with open_board(url):  # a board's first upkeep sweeps: the log keeps its last 20,000
                pass
            seen = dict(pair.split("=") for pair in (await line(proc, 30)).split())
            assert seen.get("POSTED") == "25000" or "DROPPED" in seen, seen
        finally:
            await finish(proc)
