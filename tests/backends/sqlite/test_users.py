"""Two OS users sharing a ``sqlite://`` board (review finding F6): the write turn and the session lock files are
opened read-only for ``flock``, so a user with write access to the database and its directories can use the board
and reap another user's dead session. Root only: the other user is ``nobody``, run through ``setpriv``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from jobboard import open_board

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user (setpriv, root only)")]

HOLDER = r"""
import asyncio, sys
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:
        claim = await board.claim_next("root")
        print("claimed", claim and claim.job.id, flush=True)
        await asyncio.sleep(60)

asyncio.run(main(sys.argv[1]))
"""
CLAIMER = r"""
import asyncio, sys
from jobboard import open_board

async def main(url):
    async with open_board(url) as board:  # its first upkeep probes the other sessions
        claim = await board.claim_next("nobody")
        print("claimed", claim and claim.job.id, flush=True)

asyncio.run(main(sys.argv[1]))
"""


def share(directory: Path) -> None:
    """The database, its -wal, -shm and -jobboard directory readable and writable by every user (as by a group)."""
    for path in directory.glob("jobs.db*"):
        path.chmod(0o777 if path.is_dir() else 0o666)


def lock_files(directory: Path) -> list[Path]:
    return list((directory / "jobs.db-jobboard").glob("*.lock"))


async def test_a_dead_session_of_one_user_is_reaped_by_another() -> None:
    with tempfile.TemporaryDirectory() as directory:  # under /tmp, where another user may look
        os.chmod(directory, 0o777)
        url = f"sqlite://{directory}/jobs.db?board=users"
        async with open_board(url) as board:
            job = await board.post("x")
        holder = await asyncio.create_subprocess_exec(sys.executable, "-c", HOLDER, url, stdout=asyncio.subprocess.PIPE)
        try:
            assert holder.stdout is not None
            with anyio.fail_after(20):
                claimed = await holder.stdout.readline()
            assert claimed.decode().split() == ["claimed", job.id]
            share(Path(directory))
            holder.send_signal(signal.SIGKILL)
            with anyio.fail_after(10):
                await holder.wait()
            result = await anyio.run_process(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                              sys.executable, "-c", CLAIMER, url], check=False, cwd="/")
            assert result.stdout.decode().split() == ["claimed", job.id], result.stderr.decode()[-500:]
            assert lock_files(Path(directory)) == []  # its lock file went too
        finally:
            if holder.returncode is None:
                holder.kill()
                with anyio.fail_after(10):
                    await holder.wait()
