"""The files beside a board's database: the network-filesystem check and the session lock files.

A session's claims live as long as its lock: an ``flock(LOCK_EX)`` on ``<db>-jobboard/<session>.lock``,
which the kernel drops when the process dies. Another process that can take that lock knows the owner
is dead. A heartbeat thread writes the host's monotonic clock into the file, so a stopped (SIGSTOP) owner
is seen as silent after the session timeout it declared in the same file (whatever the wall clock does: an
NTP step moves no session; whatever timeout the prober's own URL has). A silent owner is taken for stopped
only when ``/proc`` says it is (state ``T``/``t``), or cannot tell: a live one whose heartbeat thread cannot
run (a C call holding the GIL) keeps its session until :data:`HUNG_AFTER`. Never opened here: the database,
its ``-wal`` and ``-shm`` (a POSIX lock SQLite holds on them would go with any descriptor of theirs this
process closed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import threading
import time
from pathlib import Path
from typing import NamedTuple

from jobboard.errors import BackendUnavailable

logger = logging.getLogger("jobboard_sqlite")

NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs", "afs", "ncpfs",
    "virtiofs", "vboxsf", "davfs", "sshfs",
})
HEADER = struct.Struct("<dd")
"""A lock file's first bytes: the last heartbeat (monotonic seconds; the first 8 bytes, as before) and the
session timeout its owner declared (the owner's URL's, by which every prober judges it)."""
OWNER = struct.Struct("<qqQ")
"""After the header: the owner's pid, its start time (``/proc/<pid>/stat`` field 22, clock ticks after boot:
against a reused pid) and the inode of its PID namespace (0: unknown), written once."""
HUNG_AFTER = 60.0
"""Seconds of silence (or 12 of its session timeouts, if longer) after which an owner that ``/proc`` shows
running, not stopped, is taken for hung all the same and its session ended."""
_UNREADABLE: set[str] = set()
"""The lock files a probe could not open (warned about once each)."""
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
        """Create, lock and fill the file; on failure nothing is left (neither the file nor its descriptor).

        :raises BackendUnavailable: the directory cannot be written, or the disk is full (one line).
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise BackendUnavailable(unwritable(self.path, error)) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
            inode = os.fstat(fd).st_ino
            os.pwrite(fd, HEADER.pack(time.monotonic(), self.timeout) + OWNER.pack(*identity()), 0)
        except OSError as error:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise BackendUnavailable(unwritable(self.path, error)) from error
        self.fd, self._inode = fd, inode
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


def unwritable(path: Path, error: OSError) -> str:
    """One line saying why a file beside the database cannot be written."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk holding {path} is full ({error.strerror})"
    return f"cannot write {path}: {error.strerror}"


def open_turn(db_path: Path) -> int:
    """The descriptor of the file's write turn (``<db>-jobboard/write.turn``; closed in a forked child).

    :raises BackendUnavailable: it cannot be created.
    """
    path = sessions_dir(db_path) / "write.turn"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)  # flock needs no write access: any user
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
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # flock needs no write access: another user's lock too
    except FileNotFoundError:
        return True, -1
    except OSError as error:
        if str(path) not in _UNREADABLE:
            _UNREADABLE.add(str(path))
            logger.warning("cannot open the session lock %s (%s): its session is taken for alive until a process "
                           "that can open it looks", path, error.strerror)
        return False, -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            return _silent(read_lock(fd), silent_after), -1
        finally:
            os.close(fd)
    return True, fd


def _silent(lock: LockRecord, silent_after: float) -> bool:
    """Whether a held lock's owner is taken for stopped: no heartbeat for its timeout and ``/proc`` says it
    is stopped or cannot tell (another PID namespace, a lock file of an older version, a reused pid); a
    running owner only after :data:`HUNG_AFTER`."""
    timeout = lock.timeout or silent_after
    silent_for = time.monotonic() - lock.last
    if silent_for <= timeout:
        return False
    if owner_stopped(lock) is False and silent_for <= max(HUNG_AFTER, 12 * timeout):
        logger.debug("the owner (pid %d) of a session is running but has not beaten for %.1f s (a C call "
                     "holding the GIL?): its session is kept", lock.pid, silent_for)
        return False
    return True


def identity() -> tuple[int, int, int]:
    """This process's pid, start time and PID namespace (see :data:`OWNER`; 0 where ``/proc`` cannot tell)."""
    pid = os.getpid()
    seen = process_state(pid)
    return pid, 0 if seen is None else seen[1], pid_namespace()


def process_state(pid: int) -> tuple[str, int] | None:
    """The state letter and start time of process ``pid`` (``/proc/<pid>/stat`` fields 3 and 22), or
    ``None`` when there is no such process or no ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name (field 2) may hold spaces and parentheses
    return fields[0], int(fields[19])


def pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_stopped(lock: LockRecord) -> bool | None:
    """Whether a lock file's owner is stopped (``T``: SIGSTOP, Ctrl-Z; ``t``: a debugger), running
    (``False``), or ``None`` when this process cannot tell (another PID namespace, no pid recorded, the pid
    gone or reused, a zombie)."""
    if lock.pid <= 0 or lock.namespace == 0 or lock.namespace != pid_namespace():
        return None
    seen = process_state(lock.pid)
    if seen is None:  # hidden (/proc mounted hidepid=2, another user's process) or gone: ask the kernel
        return False if _exists(lock.pid) else None
    if seen[1] != lock.started or seen[0] in ("Z", "X", "x"):
        return None
    return seen[0] in ("T", "t") or frozen(lock.pid)


def _exists(pid: int) -> bool:
    """Whether process ``pid`` exists though ``/proc`` does not show it (its lock held: its owner, alive)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def frozen(pid: int) -> bool:
    """Whether process ``pid`` is frozen by its cgroup's freezer (``docker pause``, ``systemd freeze``: state ``D``
    in ``/proc``, as good as stopped): cgroup v1's ``freezer.state``, v2's ``cgroup.events``."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, group = line.split(":", 2)
        try:
            if controllers == "freezer":
                return Path(f"/sys/fs/cgroup/freezer{group}/freezer.state").read_text().strip() == "FROZEN"
            if controllers == "" and "frozen 1" in Path(f"/sys/fs/cgroup{group}/cgroup.events").read_text():
                return True
        except OSError:
            continue
    return False


def beat(fd: int) -> None:
    """Write the host's monotonic clock (``CLOCK_MONOTONIC``, shared by its processes) into the lock file."""
    os.pwrite(fd, struct.pack("<d", time.monotonic()), 0)


class LockRecord(NamedTuple):
    """What a lock file says of its session (zeros where a lock file of an older version says nothing)."""

    last: float
    """The last heartbeat (``inf`` while there is none: a session being born)."""
    timeout: float
    pid: int
    started: int
    namespace: int


def read_lock(fd: int) -> LockRecord:
    """What the lock file open as ``fd`` says (see :data:`HEADER` and :data:`OWNER`)."""
    raw = os.pread(fd, HEADER.size + OWNER.size, 0)
    if len(raw) < 8:
        return LockRecord(float("inf"), 0.0, 0, 0, 0)
    last, timeout = HEADER.unpack_from(raw) if len(raw) >= HEADER.size else (struct.unpack("<d", raw[:8])[0], 0.0)
    owner = OWNER.unpack_from(raw, HEADER.size) if len(raw) == HEADER.size + OWNER.size else (0, 0, 0)
    return LockRecord(last, timeout if timeout > 0 else 0.0, *owner)


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
