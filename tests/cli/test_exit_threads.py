"""``jobboard worker`` counts only handler threads at exit: a thread of a backend (a failed sqlite:// open's
connection thread) is not reported as a plain def handler's."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread

from jobboard.cli.threads_at_exit import handler_threads, running_threads
from tests.cli.test_edges import jobboard


def test_a_worker_on_a_file_that_is_no_database_reports_no_handler_thread(tmp_path: Path) -> None:
    path = tmp_path / "notdb.txt"
    path.write_text("not a database\n" * 100)
    result = jobboard("worker", f"sqlite://{path}", "--handlers", "docs.examples.worker:handlers")
    assert result.returncode == 1, result.stderr
    assert "is not a jobboard SQLite database" in result.stderr
    assert "handler thread" not in result.stderr, result.stderr


def test_only_a_thread_running_a_plain_def_handler_is_counted() -> None:
    release = threading.Event()
    backend_thread = threading.Thread(target=release.wait, args=(20,), name="jobboard-sqlite_0")
    backend_thread.start()

    async def run_and_leave() -> None:
        started = anyio.Event()

        def handler() -> None:  # as a plain def handler runs: anyio.to_thread.run_sync (worker.handlers.as_async)
            anyio.from_thread.run_sync(started.set)
            release.wait(20)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: anyio.to_thread.run_sync(handler, abandon_on_cancel=True))
                await started.wait()
                group.cancel_scope.cancel()  # the thread runs on, as at a worker's stop

    try:
        anyio.run(run_and_leave)
        left = running_threads()
        assert backend_thread in left
        assert [thread.name for thread in handler_threads(left)] == ["AnyIO worker thread"]
    finally:
        release.set()
        backend_thread.join(10)
