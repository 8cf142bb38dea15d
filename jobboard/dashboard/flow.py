"""Flow control in the dashboard (issue 27): a section of the overview (the limits with their running and
waiting jobs, what is paused; read from the board at each render, as no event tells them);
``GET /api/limits`` reads the same;
``POST /api/pause`` and ``/api/resume`` (``?name=NAME``, none: the whole board) are actions, guarded
like the others (``--allow-actions`` and the token header, :func:`jobboard.dashboard.api.refusal`).

A board whose backend has no flow control answers 404 with one line saying so.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobboard.board.contract import JobBoard
from jobboard.dashboard.api import dashboard, refusal
from jobboard.dashboard.html import Markup, join, table, tag
from jobboard.errors import InvalidJob, JobBoardError, Unsupported


async def limits_json(request: Request) -> Response:
    """``{"limits": [...as jobboard limit --json], "paused": {"board", "names"}}``."""
    board = dashboard(request).board
    try:
        limits, paused = await board.limits(), await board.paused()
    except Unsupported as error:
        return JSONResponse({"error": str(error)}, status_code=404)
    return JSONResponse({"limits": [each.to_json() for each in limits], "paused": paused.to_json()})


async def pause(request: Request) -> Response:
    return await _pausing(request, resume=False)


async def resume(request: Request) -> Response:
    return await _pausing(request, resume=True)


async def _pausing(request: Request, *, resume: bool) -> Response:
    if (refused := refusal(request)) is not None:
        return refused
    board = dashboard(request).board
    name = request.query_params.get("name") or None
    try:
        await (board.resume(name) if resume else board.pause(name))
        paused = await board.paused()
    except Unsupported as error:
        return JSONResponse({"error": str(error)}, status_code=404)
    except InvalidJob as error:
        return JSONResponse({"error": str(error)}, status_code=400)
    except JobBoardError as error:
        return JSONResponse({"error": f"{type(error).__name__}: {error}"}, status_code=409)
    return JSONResponse({"ok": True, "paused": paused.to_json()})


async def overview_section(board: JobBoard) -> Markup:
    """The overview's "Flow control" section; nothing on a backend without flow control (or unreadable now)."""
    try:
        limits, paused = await board.limits(), await board.paused()
    except JobBoardError:
        return Markup("")
    names = (["the whole board"] if paused.board else []) + sorted(paused.names)
    rows = ([each.group, "-" if each.concurrency is None else each.concurrency, "yes" if each.sequence else "-",
             "-" if each.rate is None else str(each.rate), each.running, each.waiting] for each in limits)
    return join([tag("h2", "Flow control"), tag("p", f"paused: {', '.join(names) or 'nothing'}", class_="paused"),
                 table(["group", "concurrency", "sequence", "rate", "running", "waiting"], rows, empty="no limits")])
