"""A server process on 127.0.0.1 with its own temp dir: what the ZooKeeper, Redis and PostgreSQL
harnesses share (free ports, installing Debian packages, spawn, wait until it serves, signal, kill,
restart, stop, reap at exit), and running a command against a server
(``python -m tests.support.<x>server run -- CMD``, :func:`main`)."""

from __future__ import annotations

import abc
import argparse
import atexit
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from subprocess import DEVNULL, STDOUT
from typing import Any, Self, TypeVar

HOST = "127.0.0.1"
_running: set[LocalServer] = set()
_apt_updated = False
S = TypeVar("S", bound="LocalServer")


def free_ports(count: int) -> list[int]:
    """``count`` distinct currently-free loopback ports."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """A currently-free loopback port."""
    return free_ports(1)[0]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound, never listening. Unlike a
    :func:`free_port` it cannot be taken meanwhile, by a server or as the source port of a connection (a
    connection to a free port of the ephemeral range can be given that same port as its source and connect
    to itself: TCP's self-connect)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        yield int(sock.getsockname()[1])


def _apt(*args: str) -> None:
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*sudo, "apt-get", *args]
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise RuntimeError(f"apt-get {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def apt_install(*packages: str) -> None:
    """``apt-get install -y packages`` (``apt-get update`` first, once per process; sudo unless root).

    :raises RuntimeError: apt-get failed (its output's end is in the message).
    """
    global _apt_updated
    if not _apt_updated:
        _apt("update")
        _apt_updated = True
    _apt("install", "-y", *packages)


class LocalServer(abc.ABC):
    """One server process; subclasses say how to run it and how to tell that it serves."""

    kind = "server"
    output = "stdout"
    """The file in the temp dir that gets the process's stdout and stderr."""
    stop_signal = signal.SIGTERM
    """What :meth:`stop` sends first (SIGKILL follows after its timeout)."""

    def __init__(self, port: int, start_timeout: float) -> None:
        self.port = port
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @abc.abstractmethod
    def command_line(self) -> list[str]:
        """The command that runs the server (``self.dir`` is set)."""

    @abc.abstractmethod
    def serving(self) -> bool:
        """Whether the server answers on its port."""

    def prepare(self, root: Path) -> None:
        """Write what the server needs into its temp dir before each start (nothing by default)."""
        return

    def popen_options(self) -> dict[str, Any]:
        """Extra keyword arguments for ``subprocess.Popen`` (e.g. the user to run as; none by default)."""
        return {}

    def log_tail(self, lines: int = 30) -> str:
        return "(no data dir)" if self.dir is None else tail(self.dir / self.output, lines)

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the process is alive (not necessarily serving)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def spawn(self) -> None:
        """Launch the process without waiting for it (no-op if running)."""
        if self.running:
            return
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix=f"jobboard-{self.kind}-"))
        self.prepare(self.dir)
        with open(self.dir / self.output, "ab") as out:  # own session: a terminal's Ctrl-C is ours
            self._proc = subprocess.Popen(self.command_line(), stdin=DEVNULL, stdout=out, stderr=STDOUT,
                                          start_new_session=True, preexec_fn=die_with_us(),  # noqa: PLW1509
                                          **self.popen_options())
        _running.add(self)

    def wait_serving(self, timeout: float | None = None) -> None:
        """Poll until the server serves. :raises RuntimeError: it exited. :raises TimeoutError:"""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.serving():
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise RuntimeError(f"{self.kind} {self.hosts} exited ({code}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.kind} {self.hosts} not serving after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.01)

    def start(self) -> Self:
        """Start (again after kill()) and wait until it serves; the process is killed on failure."""
        self.spawn()
        try:
            self.wait_serving()
        except BaseException:
            self._halt(signal.SIGKILL)
            raise
        return self

    def _halt(self, sig: signal.Signals, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` (e.g. SIGSTOP/SIGCONT) to the running server."""
        if self._proc is not None:
            self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and wait; data dir and port are kept for start()."""
        self._halt(signal.SIGKILL)

    def restart(self) -> Self:
        """Graceful stop, then start on the same data dir and port."""
        self._halt(signal.SIGTERM)
        return self.start()

    def stop(self, timeout: float = 10.0) -> None:
        """:attr:`stop_signal` (SIGKILL after ``timeout`` s) and delete the temp dir."""
        self._halt(self.stop_signal, timeout)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _reap_all() -> None:
    for server in list(_running):
        server.kill()
        server.stop()


def die_with_us() -> Callable[[], object] | None:
    """A preexec_fn that has the kernel SIGKILL the server when we die, even by kill -9.

    PR_SET_PDEATHSIG fires when the forking *thread* exits, so only the main thread uses it.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    return functools.partial(ctypes.CDLL(None).prctl, 1, int(signal.SIGKILL))  # resolved before fork


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no file)"


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _reap_child(child: subprocess.Popen[bytes]) -> int:
    for action in (None, child.terminate, child.kill):
        if action is not None:
            action()
        try:
            return exit_code(child.wait(5))
        except subprocess.TimeoutExpired:
            continue
    return exit_code(child.wait())


class _Terminated(KeyboardInterrupt):
    """SIGTERM: cleaned up like Ctrl-C, but passed on to the child at once."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def run_with(server: contextlib.AbstractContextManager[object], env: Mapping[str, str] | Callable[[], Mapping[str, str]],
             cmd: Sequence[str], banner: str | Callable[[], str]) -> int:
    """Run ``cmd`` with ``env`` added while ``server`` runs (``env`` and ``banner`` may be asked for once it
    runs); return its exit code."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    with server:
        print(banner() if callable(banner) else banner, file=sys.stderr, flush=True)
        try:
            child = subprocess.Popen(list(cmd), env={**os.environ, **(env() if callable(env) else env)})
        except OSError as exc:
            print(f"cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
            return 127
        try:
            return exit_code(child.wait())
        except KeyboardInterrupt as exc:  # a terminal's Ctrl-C reaches the child by itself
            if isinstance(exc, _Terminated):
                child.terminate()
            return _reap_child(child)


@contextlib.contextmanager
def named_or_started(env_var: str, fresh: Callable[[], S], name: Callable[[S], str]) -> Iterator[str]:
    """``env_var``'s value when set, else ``name`` of a ``fresh()`` server, started here and stopped on exit."""
    if value := os.environ.get(env_var):
        yield value
        return
    with fresh() as server:
        yield name(server)


def main(name: str, env_var: str, run: Callable[[list[str], argparse.Namespace], int],
         argv: Sequence[str] | None = None, options: Callable[[argparse.ArgumentParser], object] = lambda parser: None) -> int:
    """``python -m tests.support.<name> run [options] -- CMD ARGS...``: ``run(cmd, args)``'s exit code.

    ``options`` adds the ``run`` command's own options; a server that cannot start prints one line and gives 1.
    """
    parser = argparse.ArgumentParser(prog=f"python -m tests.support.{name}")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help=f"run CMD with {env_var} set")
    options(run_parser)
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("missing command: run -- CMD ARGS...")
    try:
        return run(cmd, args)
    except (RuntimeError, TimeoutError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
