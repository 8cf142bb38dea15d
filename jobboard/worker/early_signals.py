"""Catching SIGTERM/SIGINT from the first moment of a worker process (no heavy imports here).

``jobboard worker`` calls :func:`catch_early_signals` before it imports the rest of
jobboard, so that a signal while the process starts (imports, connecting) or while
it exits is a graceful stop, never the default action (death, exit -15).
"""

from __future__ import annotations

import atexit
import signal
from collections.abc import Callable
from types import FrameType

EARLY_SIGNALS: list[int] = []
"""SIGTERM/SIGINT received before a worker listened for signals (see :func:`catch_early_signals`)."""


def catch_early_signals() -> None:
    """Record SIGTERM/SIGINT from now on instead of dying: the worker stops at once when it starts.

    For processes that run a worker with ``handle_signals=True``: call it first
    thing, so that a signal during start-up (imports, connecting) or after the
    worker stopped listening (closing the board) is a graceful stop, not exit -15.
    """
    if not _CAUGHT[0]:
        atexit.register(_ignore_signals_at_exit)
    _CAUGHT[0] = True
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, _remember)


def _ignore_signals_at_exit() -> None:
    """Python resets handlers to the default (death) while it finalizes: a signal then would turn a
    clean exit into -15. Ignored signals stay ignored through finalization."""
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_IGN)


def _remember(number: int, frame: FrameType | None) -> None:
    EARLY_SIGNALS.append(number)
    for wake in SIGNAL_WAKERS:
        wake()


SIGNAL_WAKERS: list[Callable[[], None]] = []
"""Called (from the signal handler) after a signal was recorded: a running worker's way to hear of it."""


def catching_early_signals() -> bool:
    """Whether :func:`catch_early_signals` was called in this process."""
    return signal.getsignal(signal.SIGTERM) is _remember or _CAUGHT[0]


_CAUGHT = [False]


