"""``/events``: server-sent events telling each open page that the view changed.

Each connection waits on the live view's version (memory only: the view holds the one board
subscription, however many pages are open) and sends ``change`` with the version and whether the
board is reachable; changes are coalesced to at most one message per :data:`MIN_INTERVAL`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from jobboard.dashboard.api import dashboard
from jobboard.observe.live import LiveBoard

MIN_INTERVAL = 0.1
HEARTBEAT = 15.0
STOP_CHECK = 0.5


def change_message(live: LiveBoard) -> str:
    data = json.dumps({"version": live.version, "healthy": live.healthy})
    return f"event: change\ndata: {data}\n\n"


async def changes(live: LiveBoard, stopping: Callable[[], bool]) -> AsyncIterator[str]:
    """``change`` messages (and heartbeats) until the server stops (``stopping()``)."""
    yield "retry: 1000\n\n"
    sent, quiet = -1, 0.0
    while not stopping():
        if live.version != sent:
            sent, quiet = live.version, 0.0
            yield change_message(live)
            await anyio.sleep(MIN_INTERVAL)
            continue
        with anyio.move_on_after(STOP_CHECK):
            await live.changed(sent)
        quiet += STOP_CHECK
        if quiet >= HEARTBEAT:
            quiet = 0.0
            yield ": heartbeat\n\n"


async def events(request: Request) -> Response:
    d = dashboard(request)
    return StreamingResponse(changes(d.live, request.app.state.stopping), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
