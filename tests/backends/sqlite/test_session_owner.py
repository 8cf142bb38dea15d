"""How a board judges another session's owner from its lock file (jobboard_sqlite.files.probe): by the
timeout the owner declared, and a silent owner only when it is really stopped."""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobboard_sqlite import files


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A lock file held (``flock``) by this process, as its owner holds it; empty."""
    path = tmp_path / "s.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield path, fd
    os.close(fd)


def test_a_session_is_judged_by_the_timeout_its_owner_declared(held: tuple[Path, int]) -> None:
    path, fd = held
    os.pwrite(fd, files.HEADER.pack(time.monotonic() - 1.0, 5.0), 0)  # beat 1 s ago, declared 5 s
    assert files.probe(path, 0.5) == (False, -1)  # not the prober's 0.5 s
    os.pwrite(fd, files.HEADER.pack(time.monotonic() - 1.0, 0.5), 0)
    assert files.probe(path, 30.0)[0]


def test_a_lock_file_of_an_older_version_is_judged_by_the_probers_timeout(held: tuple[Path, int]) -> None:
    path, fd = held
    os.pwrite(fd, struct.pack("<d", time.monotonic() - 1.0), 0)  # the heartbeat alone
    assert files.probe(path, 0.5)[0]
    assert not files.probe(path, 5.0)[0]
