"""How a board judges another session's owner from its lock file (jobboard_sqlite.files.probe): by the
timeout the owner declared, and a silent owner only when it is really stopped."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
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


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process (``sleep``) to name as a lock file's owner."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait(10)


def owned_by(fd: int, pid: int, silent_for: float, started: int | None = None, namespace: int | None = None) -> None:
    """Write a lock file's header naming ``pid`` as its owner, its last beat ``silent_for`` seconds ago
    (declared timeout 0.5 s)."""
    seen = files.process_state(pid)
    assert seen is not None
    record = files.HEADER.pack(time.monotonic() - silent_for, 0.5) + files.OWNER.pack(
        pid, seen[1] if started is None else started, files.pid_namespace() if namespace is None else namespace)
    os.pwrite(fd, record, 0)


def state_of(pid: int) -> str:
    seen = files.process_state(pid)
    return "" if seen is None else seen[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_silent_owner_is_taken_for_stopped_only_when_it_is(held: tuple[Path, int],
                                                             sleeper: subprocess.Popen[bytes]) -> None:
    path, fd = held
    owned_by(fd, sleeper.pid, 2.0)
    assert files.probe(path, 0.5) == (False, -1)  # running (sleeping): a C call holding the GIL looks like this
    sleeper.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while state_of(sleeper.pid) != "T":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert files.probe(path, 0.5)[0]  # stopped (SIGSTOP, Ctrl-Z, a debugger): its session ends at its timeout
    sleeper.send_signal(signal.SIGCONT)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_running_owner_silent_past_the_hung_bound_is_taken_for_dead(held: tuple[Path, int],
                                                                      sleeper: subprocess.Popen[bytes]) -> None:
    path, fd = held
    owned_by(fd, sleeper.pid, files.HUNG_AFTER + 1)
    assert files.probe(path, 0.5)[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("case", ["reused pid", "another namespace", "no such pid"])
def test_a_silent_owner_proc_cannot_tell_about_is_judged_by_its_heartbeat(
        held: tuple[Path, int], sleeper: subprocess.Popen[bytes], case: str) -> None:
    path, fd = held
    seen = files.process_state(sleeper.pid)
    assert seen is not None
    if case == "reused pid":
        owned_by(fd, sleeper.pid, 2.0, started=seen[1] + 1)
    elif case == "another namespace":
        owned_by(fd, sleeper.pid, 2.0, namespace=files.pid_namespace() + 1)
    else:
        owned_by(fd, sleeper.pid, 2.0)
        sleeper.kill()
        sleeper.wait(10)
    assert files.probe(path, 0.5)[0]
    owned_by(fd, os.getpid() if case == "no such pid" else sleeper.pid, 0.1)
    assert not files.probe(path, 0.5)[0]  # a fresh heartbeat: alive whatever /proc says
