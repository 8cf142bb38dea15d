"""A dashboard to test: ``jobboard dashboard`` as a real process, or the app served in the test's loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import anyio

from jobboard.board.contract import JobBoard
from tests.support.localserver import die_with_us
from tests.support.zkserver import free_port

START_TIMEOUT = 30.0
TOKEN = "test-token-0123456789"
T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T]], within: float = 10.0, poll: float = 0.05) -> T:
    """The first truthy result of ``check()``, polled: what it reads changes in another process or thread."""
    with anyio.fail_after(within):
        while not (value := await check()):  # noqa: ASYNC110 - no event to wait on across processes
            await anyio.sleep(poll)
    return value


def http(method: str, url: str, headers: Mapping[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, str], str]:
    """One HTTP request: status, headers (lower-case names), body text; HTTP errors are answers too."""
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


async def ahttp(method: str, url: str, headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    return await anyio.to_thread.run_sync(lambda: http(method, url, headers))


def wait_until_serving(base: str, child: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if child is not None and child.poll() is not None:
            raise RuntimeError(f"the dashboard exited with status {child.returncode}")
        try:
            if http("GET", f"{base}/api/stats", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no dashboard at {base} after {START_TIMEOUT} s")


@contextmanager
def dashboard_process(url: str, *args: str, token: str | None = None) -> Iterator[str]:
    """``jobboard dashboard url args`` on a free port; yields its base URL; stopped (then killed) on exit."""
    port = free_port()
    env = {**os.environ, "JOBBOARD_DASHBOARD_TOKEN": token} if token else dict(os.environ)
    child = subprocess.Popen([sys.executable, "-m", "jobboard", "dashboard", url, "--port", str(port), *args],
                             env=env, stdout=subprocess.DEVNULL, preexec_fn=die_with_us())  # noqa: PLW1509
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, child)
        yield base
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


@asynccontextmanager
async def dashboard_in_loop(board: JobBoard, **options: Any) -> AsyncIterator[str]:
    """The app of ``board`` served by uvicorn in this event loop (for in-process boards); yields its URL."""
    import uvicorn

    from jobboard.dashboard.app import create_app, serve_with
    from jobboard.dashboard.model import Options

    live_options = options.pop("live_options", None)
    port = free_port()
    app = create_app(board, Options(**options), live_options=live_options)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                          timeout_graceful_shutdown=1))
    serve_with(app, server)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)

        async def started() -> bool:
            return bool(server.started)

        await eventually(started, START_TIMEOUT, 0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


def stats(base: str) -> dict[str, Any]:
    status, _, body = http("GET", f"{base}/api/stats")
    assert status == 200, body
    result: dict[str, Any] = json.loads(body)
    return result
