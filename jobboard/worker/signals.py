"""How a running worker hears SIGTERM/SIGINT.

In a process that called :func:`~jobboard.worker.early_signals.catch_early_signals`
(``jobboard worker`` does), that handler stays in place for the process's whole
life and wakes the worker; there is no moment with the default action (death).
Otherwise anyio's signal receiver is used while the worker runs.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import anyio
import anyio.abc

from jobboard.worker.early_signals import EARLY_SIGNALS, SIGNAL_WAKERS, catching_early_signals


async def listen_for_signals(
    on_signal: Callable[[int], None], *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_signal(number)`` for each SIGTERM/SIGINT until cancelled (also for one caught earlier)."""
    if catching_early_signals():
        await _recorded_signals(on_signal, task_status)
        return
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for number in signals:
            on_signal(number)


async def _recorded_signals(on_signal: Callable[[int], None], task_status: anyio.abc.TaskStatus[None]) -> None:
    """Hear signals through :func:`~jobboard.worker.early_signals.catch_early_signals`' handler."""
    loop = asyncio.get_running_loop()
    arrived = [anyio.Event()]

    def wake() -> None:  # runs in the signal handler: the self-pipe write wakes a sleeping loop
        loop.call_soon_threadsafe(arrived[0].set)

    SIGNAL_WAKERS.append(wake)
    try:
        task_status.started()
        while True:
            while EARLY_SIGNALS:
                on_signal(EARLY_SIGNALS.pop(0))
            await arrived[0].wait()
            arrived[0] = anyio.Event()
    finally:
        SIGNAL_WAKERS.remove(wake)
