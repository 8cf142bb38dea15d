"""JSON reads and the actions (cancel; requeue and purge when the board has them).

Actions are refused unless the dashboard was started with ``--allow-actions``; each needs the token
given at start in the ``X-Jobboard-Token`` header, compared in constant time. No cookie is ever
read: a page on another site cannot send that header without a CORS preflight, which this app
never grants, so actions are safe from cross-site request forgery.
"""

from __future__ import annotations

import hmac
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobboard.board.contract import JobBoard
from jobboard.dashboard.model import Dashboard, JobFilter
from jobboard.errors import JobBoardError, JobNotFound
from jobboard.job import ListedJob, Priority

TOKEN_HEADER = "X-Jobboard-Token"
CANCEL_REASON = "cancelled from the dashboard"


def supports(board: JobBoard, method: str) -> bool:
    """Whether ``board`` implements ``method`` (not merely inherits a base that refuses it)."""
    implementation = getattr(type(board), method, None)
    return callable(implementation) and implementation is not getattr(JobBoard, method, None)


def dashboard(request: Request) -> Dashboard:
    result: Dashboard = request.app.state.dashboard
    return result


def job_filter(request: Request) -> JobFilter:
    params = request.query_params
    try:
        page = int(params.get("page", "1"))
    except ValueError:
        page = 1
    return JobFilter(params.get("state", ""), params.get("name", ""), params.get("priority", ""),
                     params.get("owner", ""), page)


def listed_json(item: ListedJob) -> dict[str, Any]:
    job = item.job
    return {"id": job.id, "name": job.name, "state": item.state.value, "owner": item.owner,
            "priority": Priority(job.priority).name.lower(), "attempts": job.attempts,
            "created_at": job.created_at, "depends_on": list(job.depends_on)}


async def stats_json(request: Request) -> Response:
    d = dashboard(request)
    body = d.stats().to_json()
    body.update(healthy=d.live.healthy, version=d.live.version,
                throughput=[{"at": at, "posted": p, "consumed": c, "trashed": t}
                            for at, p, c, t in d.live.throughput()])
    return JSONResponse(body)


async def jobs_json(request: Request) -> Response:
    page = dashboard(request).jobs_page(job_filter(request))
    return JSONResponse({"total": page.total, "page": page.page, "pages": page.pages,
                         "jobs": [listed_json(item) for item in page.items]})


# -- actions -------------------------------------------------------------------------


def refusal(request: Request) -> Response | None:
    """Why this action request is refused, or ``None`` when it may go ahead."""
    options = dashboard(request).options
    if not options.allow_actions or not options.token:
        return JSONResponse({"error": "read-only dashboard (start it with --allow-actions --token T)"},
                            status_code=403)
    given = request.headers.get(TOKEN_HEADER, "")
    if not hmac.compare_digest(given.encode(), options.token.encode()):
        return JSONResponse({"error": f"missing or wrong {TOKEN_HEADER} header"}, status_code=401)
    return None


async def _act(request: Request, method: str, *args: Any, **kwargs: Any) -> Response:
    if (refused := refusal(request)) is not None:
        return refused
    board = dashboard(request).board
    if method != "cancel" and not supports(board, method):
        return JSONResponse({"error": f"this board has no {method}"}, status_code=404)
    try:
        result = await getattr(board, method)(*args, **kwargs)
    except JobNotFound as error:
        return JSONResponse({"error": str(error)}, status_code=404)
    except JobBoardError as error:
        return JSONResponse({"error": f"{type(error).__name__}: {error}"}, status_code=409)
    return JSONResponse({"ok": True, "result": result if isinstance(result, int) else None})


async def cancel(request: Request) -> Response:
    return await _act(request, "cancel", request.path_params["job_id"], CANCEL_REASON)


async def requeue(request: Request) -> Response:
    return await _act(request, "requeue", request.path_params["job_id"])


async def purge(request: Request) -> Response:
    try:
        older_than = float(request.query_params.get("older_than", "0"))
    except ValueError:
        older_than = math.nan
    if not math.isfinite(older_than) or older_than < 0:
        return JSONResponse({"error": "older_than must be a number of seconds >= 0"}, status_code=400)
    return await _act(request, "purge", older_than=older_than)
