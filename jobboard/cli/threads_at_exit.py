"""A worker process does not wait for handler threads at exit.

A plain ``def`` handler runs in a thread, and Python cannot interrupt a thread. After the
grace period the worker abandons such a job (it goes back to the board) and stops; the
interpreter would then wait for the thread before exiting, for as long as the handler
runs, while an orchestrator waits for the process and another worker runs the job again.
So the worker command ends the process at once instead, saying how many threads it left.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time

logger = logging.getLogger("jobboard.worker")

SETTLE_SECONDS = 0.5
"""How long threads that are just finishing (idle pool threads told to stop) get first."""


HANDLER_THREAD_NAME = "AnyIO worker thread"
"""The name of the threads ``anyio.to_thread.run_sync`` runs a plain ``def`` handler in
(:func:`jobboard.worker.handlers.as_async`); other threads left (a backend's, the program's) are no handler's."""


def running_threads() -> list[threading.Thread]:
    """Threads the interpreter would wait for at exit (not daemon, alive, not this one)."""
    return [thread for thread in threading.enumerate()
            if thread is not threading.current_thread() and not thread.daemon and thread.is_alive()]


def handler_threads(threads: list[threading.Thread]) -> list[threading.Thread]:
    """Those of ``threads`` that run handlers (anyio's worker threads: at exit, only a handler still runs in one)."""
    return [thread for thread in threads if thread.name == HANDLER_THREAD_NAME]


def exit_without_waiting(status: int) -> None:
    """Exit with ``status`` now if threads are still running; return if none are."""
    deadline = time.monotonic() + SETTLE_SECONDS
    for thread in running_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = running_threads()
    if not left:
        return
    if handlers := handler_threads(left):
        logger.warning("exiting with %d handler thread(s) still running: a plain def handler cannot be "
                       "interrupted; its job was put back on the board", len(handlers))
    if others := [thread.name for thread in left if thread not in handlers]:
        logger.debug("exiting without waiting for thread(s) %s", ", ".join(others))
    atexit._run_exitfuncs()  # exporters, log handlers: what a normal exit would flush
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
