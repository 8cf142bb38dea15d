"""The Starlette application: pages, JSON, server-sent events, static files, ``/metrics``.

:func:`create_app` serves an open board: its lifespan starts one :class:`~jobboard.observe.live.LiveBoard`
(one board subscription) and one :class:`~jobboard.dashboard.model.Dashboard` for every request.
Every response forbids inline scripts and framing (Content-Security-Policy), so even a value that
escaped escaping could not run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.resources
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobboard.board.contract import JobBoard
from jobboard.dashboard import api, flow, pages, sse
from jobboard.dashboard.html import Markup, join, layout, tag
from jobboard.dashboard.model import Dashboard, Options
from jobboard.errors import JobBoardError
from jobboard.observe.live import LiveBoard

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
CSP = (b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       b"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP),
    (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every HTTP response (pure ASGI: streaming is untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


PageBody = Callable[[Request, Dashboard], Awaitable[tuple[str, Markup, Markup]]]


def page(name: str, body: PageBody, *, graphs: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """A page route: the whole page, or only ``<main>``'s content when app.js asks (``X-Fragment``)."""

    async def endpoint(request: Request) -> Response:
        d = api.dashboard(request)
        title, content, before = await body(request, d)
        if request.headers.get("x-fragment"):
            return HTMLResponse(content, headers={"Cache-Control": "no-store"})
        return HTMLResponse(layout(name, title, content, board_url=d.board.url, healthy=d.live.healthy,
                                   actions=d.options.allow_actions, before_main=before, graphs=graphs),
                            headers={"Cache-Control": "no-store"})

    return endpoint


NOTHING = Markup("")


async def overview(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    return "Overview", join([pages.overview(d), await flow.overview_section(d.board)]), NOTHING


async def jobs(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    query = api.job_filter(request)
    return ("Jobs", pages.jobs(d.jobs_page(query), query, d.options.allow_actions),
            pages.jobs_filter_form(query, d.names()))


async def job(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    job_id = request.path_params["job_id"]
    view = await d.job_view(job_id)
    return (f"Job {job_id}", pages.job_page(view, job_id, d.options.allow_actions, api.supports(d.board, "requeue")),
            NOTHING)


async def trash(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    entries = await d.trash()
    return "Trash", pages.trash(entries, len(entries), d.options.allow_actions, api.supports(d.board, "requeue"),
                                api.supports(d.board, "purge")), NOTHING


async def workers(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    return "Workers", pages.workers(d), NOTHING


async def plans(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    views = [view for plan_id in d.plan_ids() if (view := await d.plan_view(plan_id)) is not None]
    return "Plans", pages.plans(views), NOTHING


async def plan(request: Request, d: Dashboard) -> tuple[str, Markup, Markup]:
    plan_id = request.path_params["plan_id"]
    return f"Plan {plan_id}", pages.plan_page(await d.plan_view(plan_id), plan_id), NOTHING


async def board_error(request: Request, error: Exception) -> Response:
    """A board read failed while a page was served: say so (503), in the page's own layout."""
    d = api.dashboard(request)
    message = f"{type(error).__name__}: {' '.join(str(error).split())}"
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=503)
    body = join([tag("h1", "The board did not answer"), tag("p", message, class_="malformed"),
                 tag("p", "This page shows again by itself when the board answers.")])
    if request.headers.get("x-fragment"):
        return HTMLResponse(body, status_code=503)
    return HTMLResponse(layout("error", "Board unreachable", body, board_url=d.board.url, healthy=False,
                               actions=d.options.allow_actions), status_code=503)


class _Asgi:
    """An ASGI callable as a route endpoint (Starlette takes a plain function for a request handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def metrics_app(live: LiveBoard) -> ASGIApp | None:
    """The board's Prometheus gauges from this view, when ``jobboard.observe.metrics`` (extra ``jobboard[metrics]``)
    is installed: its ``asgi_app(live)`` if it has one, else its ``BoardCollector(live)`` served by
    ``prometheus_client.make_asgi_app`` (collected on the event loop, as the view wants)."""
    try:
        metrics: Any = importlib.import_module("jobboard.observe.metrics")
    except ImportError:
        return None
    if callable(factory := getattr(metrics, "asgi_app", None)):
        return _Asgi(factory(live))
    collector = getattr(metrics, "BoardCollector", None)
    try:
        prometheus: Any = importlib.import_module("prometheus_client")
    except ImportError:
        return None
    if collector is None:
        return None
    registry = prometheus.CollectorRegistry()
    registry.register(collector(live))
    return _Asgi(prometheus.make_asgi_app(registry))


def routes() -> list[BaseRoute]:
    static = importlib.resources.files("jobboard.dashboard") / "static"
    return [
        Route("/", page("overview", overview)),
        Route("/jobs", page("jobs", jobs)),
        Route("/jobs/{job_id:path}", page("jobs", job)),
        Route("/trash", page("trash", trash)),
        Route("/workers", page("workers", workers)),
        Route("/plans", page("plans", plans)),
        Route("/plans/{plan_id:path}", page("plans", plan, graphs=True)),
        Route("/events", sse.events),
        Route("/api/stats", api.stats_json),
        Route("/api/jobs", api.jobs_json),
        Route("/api/jobs/{job_id:path}/cancel", api.cancel, methods=["POST"]),
        Route("/api/trash/purge", api.purge, methods=["POST"]),
        Route("/api/trash/{job_id:path}/requeue", api.requeue, methods=["POST"]),
        Route("/api/limits", flow.limits_json),
        Route("/api/pause", flow.pause, methods=["POST"]),
        Route("/api/resume", flow.resume, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]


def create_app(board: JobBoard, options: Options | None = None, *, host: str = "127.0.0.1",
               live_options: dict[str, Any] | None = None) -> Starlette:
    """The dashboard of ``board`` (open, and kept open by the caller while the app runs); see
    :func:`serve_with` to end the live streams when the server stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with LiveBoard(board, **(live_options or {})) as live, anyio.create_task_group() as group:
            app.state.dashboard = dashboard = Dashboard(live, options or Options())
            if (metrics := metrics_app(live)) is not None:
                app.router.routes.append(Route("/metrics", metrics))
            group.start_soon(dashboard.run)
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    middleware = [Middleware(SecurityHeaders)]
    if host in LOOPBACK:  # DNS rebinding: a loopback dashboard answers to loopback names only
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK)))
    app = Starlette(routes=routes(), middleware=middleware, lifespan=lifespan,
                    exception_handlers={JobBoardError: board_error})
    app.state.stopping = lambda: False
    return app


def serve_with(app: Starlette, server: Any) -> None:
    """Have the live streams of ``app`` end when the uvicorn ``server`` is told to stop."""
    app.state.stopping = lambda: bool(server.should_exit)

