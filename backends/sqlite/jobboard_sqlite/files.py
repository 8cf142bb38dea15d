"""The files beside a board's database: the network-filesystem check and the session lock files.

A session's claims live as long as its lock: an ``flock(LOCK_EX)`` on ``<db>-jobboard/<session>.lock``,
which the kernel drops when the process dies. Another process that can take that lock knows the owner
is dead. A heartbeat thread writes the host's monotonic clock into the file, so a stopped (SIGSTOP) owner
is seen as silent after the session timeout it declared in the same file (whatever the wall clock does: an NTP
step moves no session; whatever timeout the prober's own URL has). Never opened here: the database, its ``-wal`` and ``-shm`` (a POSIX lock
SQLite holds on them would go with any descriptor of theirs this process closed).
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from pathlib import Path

from jobboard.errors import BackendUnavailable

logger = logging.getLogger("jobboard_sqlite")

NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs", "afs", "ncpfs",
    "virtiofs", "vboxsf", "davfs", "sshfs",
})
HEADER = struct.Struct("<dd")
"""A lock file's first bytes: the last heartbeat (monotonic seconds; the first 8 bytes, as before) and the
session timeout its owner declared (the owner's URL's, by which every prober judges it)."""
_OPEN_LOCKS: set[int] = set()
"""Descriptors of this process's lock files (closed in a forked child: it must not keep owners alive)."""


def filesystem_of(path: Path, mountinfo: str | None = None) -> str:
    """The type of the filesystem holding ``path`` (its longest mount point), from ``/proc/self/mountinfo``;
    ``""`` where that cannot be read."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    target, best, fstype = os.path.realpath(path), "", ""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, fstype = mount_point, line.split(" - ", 1)[1].split()[0]
    return fstype


def is_network_filesystem(fstype: str) -> bool:
    return fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse")


def check_directory(path: Path, network_fs: bool) -> None:
    """Refuse a network filesystem (unless ``network_fs``); make the file's directory.

    :raises BackendUnavailable: in one line saying why.
    """
    directory = path.parent
    fstype = filesystem_of(directory)
    if is_network_filesystem(fstype) and not network_fs:
        raise BackendUnavailable(
            f"{path} is on a {fstype} filesystem: SQLite's WAL needs one host's shared memory and reliable locks "
            "(refused; add ?network_fs=1 to open it anyway, one host only)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BackendUnavailable(f"cannot use {directory} for {path}: {error.strerror}") from None


def sessions_dir(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + "-jobboard")


class SessionLock:
    """This session's lock file, held (``flock``) from :meth:`acquire` to :meth:`release`.

    It holds the session's ``timeout`` (written once) and a heartbeat: a thread writes the monotonic clock
    into it every ``timeout / 4`` seconds (a blocked event loop does not stop it, a stopped process does)
    and notices when the file was removed or replaced under it (``lost``).
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path, self.timeout, self.interval = path, timeout, timeout / 4
        self.fd = -1
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inode = 0

    def acquire(self) -> None:
        """:raises BackendUnavailable: the directory cannot be written."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise BackendUnavailable(f"cannot create session lock {self.path}: {error.strerror}") from error
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
        self.fd, self._inode = fd, os.fstat(fd).st_ino
        os.pwrite(fd, HEADER.pack(time.monotonic(), self.timeout), 0)
        _OPEN_LOCKS.add(fd)
        self._thread = threading.Thread(target=self._beat, name=f"jobboard-heartbeat-{self.path.stem}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                beat(self.fd)
                if os.stat(self.path).st_ino != self._inode:
                    raise FileNotFoundError(self.path)
            except OSError:
                self.lost.set()
                return

    def release(self, unlink: bool = True) -> None:
        """Stop the heartbeat, remove the file (when still ours) and drop the lock. Idempotent."""
        self._stop.set()
        if self.fd < 0:
            return
        if unlink and not self.lost.is_set():
            try:
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass
        _OPEN_LOCKS.discard(self.fd)
        os.close(self.fd)  # the kernel drops the flock with the last descriptor
        self.fd = -1


def open_turn(db_path: Path) -> int:
    """The descriptor of the file's write turn (``<db>-jobboard/write.turn``; closed in a forked child).

    :raises BackendUnavailable: it cannot be created.
    """
    path = sessions_dir(db_path) / "write.turn"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise BackendUnavailable(f"cannot create {path}: {error.strerror}") from error
    _OPEN_LOCKS.add(fd)
    return fd


def close_turn(fd: int) -> None:
    if fd >= 0:
        _OPEN_LOCKS.discard(fd)
        os.close(fd)


def probe(path: Path, silent_after: float) -> tuple[bool, int]:
    """Whether the session owning lock file ``path`` is dead, and the descriptor proving it (-1 if not
    held): the lock could be taken (its process died), the file is gone, or its last heartbeat is older
    than the session timeout its owner declared in the file (``silent_after``, the prober's, for a file of a
    version that declared none) on the monotonic clock (a stopped process). The caller closes the
    descriptor after cleaning up."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return True, -1
    except OSError:
        return False, -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            last, declared = last_beat(fd)
            silent = time.monotonic() - last > (declared or silent_after)
        finally:
            os.close(fd)
        return silent, -1
    return True, fd


def beat(fd: int) -> None:
    """Write the host's monotonic clock (``CLOCK_MONOTONIC``, shared by its processes) into the lock file."""
    os.pwrite(fd, struct.pack("<d", time.monotonic()), 0)


def last_beat(fd: int) -> tuple[float, float]:
    """The last heartbeat written into a lock file (``inf`` while it has none: a session being born) and
    the session timeout its owner declared (``0.0``: none, a lock file of an older version)."""
    raw = os.pread(fd, HEADER.size, 0)
    if len(raw) >= HEADER.size:
        last, timeout = HEADER.unpack(raw)
        return last, timeout if timeout > 0 else 0.0
    return (struct.unpack("<d", raw[:8])[0] if len(raw) >= 8 else float("inf")), 0.0


def drop_dead(path: Path, fd: int) -> None:
    """Remove a dead session's lock file and close the probe's descriptor."""
    try:
        os.unlink(path)
    except OSError:
        pass
    if fd >= 0:
        os.close(fd)


def _close_in_child() -> None:
    for fd in list(_OPEN_LOCKS):
        try:
            os.close(fd)
        except OSError:
            pass
    _OPEN_LOCKS.clear()


os.register_at_fork(after_in_child=_close_in_child)
