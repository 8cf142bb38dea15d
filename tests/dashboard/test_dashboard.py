"""The dashboard over HTTP (no browser): pages, escaping, actions and their token, live events,
malformed input, the command line. The app runs in the test's loop on a memory:// board."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
import urllib.parse
import uuid
from typing import Any

import anyio
import pytest

from jobboard.board.contract import JobBoard
from jobboard.dashboard.html import h, mermaid_graph, pretty
from jobboard.dashboard.model import JobFilter
from jobboard.dashboard.pages import jobs as jobs_body
from jobboard.dashboard.pages import progress_text
from jobboard.errors import BackendUnavailable
from jobboard.job import Job, JobState, ListedJob
from jobboard.plans.dag import Plan
from jobboard.plans.posting import post_plan
from jobboard_memory import MemoryBackend
from jobboard_memory.board import MemoryBoard
from tests.support.dashboard import TOKEN, ahttp, dashboard_in_loop, eventually

pytestmark = pytest.mark.timeout(60)
EVIL = "<script>window.__xss = 1</script>"
PAGES = ("/", "/jobs", "/trash", "/workers", "/plans")


async def posted_and_seen(base: str, board: JobBoard, name: str, **details: Any) -> str:
    job = await board.post(name, details)
    await shows(base, f"/jobs?name={urllib.parse.quote(name)}", job.id)
    return job.id


async def shows(base: str, path: str, text: str) -> None:
    async def check() -> bool:
        return text in (await ahttp("GET", base + path))[2]

    await eventually(check)


async def test_every_page_loads_and_escapes_what_jobs_say(board: JobBoard) -> None:
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            job_id = await posted_and_seen(base, board, EVIL, html=EVIL, blob=b"\x00\xff")
            await board.register_entity(EVIL, {"note": EVIL})
            await board.cancel(await board.post("gone"), EVIL)
            for path in (*PAGES, f"/jobs/{job_id}"):
                status, headers, body = await ahttp("GET", base + path)
                assert status == 200, (path, body)
                assert "<script>window" not in body, path
                assert "script-src 'self'" in headers["content-security-policy"]
                assert headers["x-frame-options"] == "DENY"
            page = (await ahttp("GET", f"{base}/jobs/{job_id}"))[2]
            assert h(EVIL) in page and "&lt;script&gt;window.__xss" in page


async def test_actions_are_refused_read_only_and_without_the_token(board: JobBoard) -> None:
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            job = await board.post("keep")
            status, _, body = await ahttp("POST", f"{base}/api/jobs/{job.id}/cancel", {"X-Jobboard-Token": TOKEN})
            assert status == 403 and "read-only" in body
        async with dashboard_in_loop(board, allow_actions=True, token=TOKEN) as base:
            for headers in ({}, {"X-Jobboard-Token": "wrong"}, {"Cookie": f"token={TOKEN}"}):
                status, _, body = await ahttp("POST", f"{base}/api/jobs/{job.id}/cancel", headers)
                assert status == 401, body
            assert await board.state(job) is JobState.UNCLAIMED
            status, _, _ = await ahttp("GET", f"{base}/api/jobs/{job.id}/cancel", {"X-Jobboard-Token": TOKEN})
            assert status == 405
            status, _, body = await ahttp("POST", f"{base}/api/jobs/{job.id}/cancel", {"X-Jobboard-Token": TOKEN})
            assert status == 200, body
            assert await board.state(job) is JobState.TRASHED
            status, _, body = await ahttp("POST", f"{base}/api/jobs/nope/cancel", {"X-Jobboard-Token": TOKEN})
            assert status == 404, body


async def test_requeue_and_purge_are_offered_only_when_the_board_has_them(board: JobBoard) -> None:
    has = {method: callable(getattr(type(board), method, None)) and
           getattr(type(board), method) is not getattr(JobBoard, method, None) for method in ("requeue", "purge")}
    with anyio.fail_after(30):
        async with dashboard_in_loop(board, allow_actions=True, token=TOKEN) as base:
            job = await board.post("x")
            await board.cancel(job, "for the test")
            trash_page = (await ahttp("GET", f"{base}/trash"))[2]
            assert ("/requeue" in trash_page) is has["requeue"]
            assert ("/api/trash/purge" in trash_page) is has["purge"]
            status, _, _ = await ahttp("POST", f"{base}/api/trash/{job.id}/requeue", {"X-Jobboard-Token": TOKEN})
            assert status == (200 if has["requeue"] else 404)


async def test_a_page_is_told_of_a_change_within_a_second(board: JobBoard) -> None:
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            port = int(base.rsplit(":", 1)[1])
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                received = b""
                while b"event: change" not in received:
                    received += await stream.receive()
                posted = time.monotonic()
                await board.post("live")
                received = b""
                with anyio.fail_after(1):
                    while b"event: change" not in received:
                        received += await stream.receive()
                print(f"event to SSE message: {1000 * (time.monotonic() - posted):.0f} ms")


async def test_open_pages_share_one_board_subscription(board: JobBoard) -> None:
    assert isinstance(board.backend, MemoryBackend)
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            port = int(base.rsplit(":", 1)[1])
            streams = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(4)]
            for stream in streams:
                await stream.send(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            for stream in streams:
                received = b""
                while b"event: change" not in received:
                    received += await stream.receive()
            assert len(board.hub._streams) == 1  # the live view's, whatever number of pages
            for stream in streams:
                await stream.aclose()


async def test_a_malformed_entry_is_shown_and_breaks_no_page(board: JobBoard) -> None:
    assert isinstance(board.backend, MemoryBackend)
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            board.backend.inject_malformed(b"\x93not a posting")
            [_ async for _ in board.iterjobs()]  # the board reports it as it meets it
            await shows(base, "/", "not a valid posting")
            for path in PAGES:
                assert (await ahttp("GET", base + path))[0] == 200
            [entry] = board.backend._store.malformed
            status, _, body = await ahttp("GET", f"{base}/jobs/{entry}")
            assert status == 200 and "malformed entry: not a valid posting" in body


class DownBoard(MemoryBoard):
    """A memory board whose reads fail while ``down`` (as a backend that cannot be reached)."""

    down = False

    async def get(self, job: Any) -> Job:
        if self.down:
            raise BackendUnavailable("the test took the backend down")
        return await super().get(job)


async def test_a_page_that_must_read_the_board_says_when_it_cannot() -> None:
    with anyio.fail_after(30):
        async with DownBoard(f"memory://dash-{uuid.uuid4().hex}") as board, dashboard_in_loop(board) as base:
            board.down = True
            status, _, body = await ahttp("GET", f"{base}/jobs/job-gone")
            assert status == 503 and "did not answer" in body and "BackendUnavailable" in body
            assert (await ahttp("GET", f"{base}/jobs"))[0] == 200  # the live view's pages still serve
            board.down = False
            assert (await ahttp("GET", f"{base}/jobs/job-gone"))[0] == 200


class UnreachableBoard(MemoryBoard):
    """A memory board that, while ``down``, fails the live view's entity reads and makes a job read
    wait (as a backend waiting out its connect timeout)."""

    down = False

    async def entities(self) -> list[Any]:
        if self.down:
            raise BackendUnavailable("the test took the backend down")
        return await super().entities()

    async def get(self, job: Any) -> Job:
        if self.down:
            await anyio.sleep(10)
            raise BackendUnavailable("connect timeout")
        return await super().get(job)


async def test_the_job_page_answers_at_once_while_the_board_is_unreachable() -> None:
    """/jobs/ID took ~10 s to answer 503 while the live view already knew the board was unreachable."""
    with anyio.fail_after(30):
        async with UnreachableBoard(f"memory://dash-{uuid.uuid4().hex}") as board, \
                dashboard_in_loop(board, live_options={"entity_refresh": 0.05}) as base:
            listed = await posted_and_seen(base, board, "seen")
            gone = await posted_and_seen(base, board, "gone")
            await board.consume(await board.claim(gone, "w1"))
            await shows(base, "/", "<td>consumed</td>")  # the dashboard saw it end
            board.down = True
            await shows(base, "/", 'data-healthy="no"')
            started = time.monotonic()
            status, _, body = await ahttp("GET", f"{base}/jobs/{listed}")
            assert status == 200 and "job seen" in body and "as last seen, may be stale" in body, body
            status, _, body = await ahttp("GET", f"{base}/jobs/{gone}")
            assert status == 200 and "complete" in body and "may be stale" in body, body
            status, _, body = await ahttp("GET", f"{base}/jobs/never-posted")
            assert status == 503 and "is not in the last known state" in body, body
            assert time.monotonic() - started < 5  # three answers, none waiting on the board


def test_a_job_that_cannot_be_shown_is_a_malformed_row() -> None:
    odd = Job("job-1", "odd", priority=77)  # type: ignore[arg-type]  # not a Priority: as from a foreign writer
    fine = Job("job-2", "fine")
    page = types.SimpleNamespace(items=[ListedJob(odd, JobState.UNCLAIMED), ListedJob(fine, JobState.UNCLAIMED)],
                                 total=2, page=1, pages=1)
    body = jobs_body(page, JobFilter(), actions=False)  # type: ignore[arg-type]
    assert "malformed job: ValueError" in body and "job-2" in body
    assert "not shown as JSON" not in pretty({"a": 1}) and "more characters" in pretty("x" * 30_000)
    reporting = types.SimpleNamespace(progress=types.SimpleNamespace(fraction=0.5, note="resizing"))
    assert progress_text(reporting) == "50% resizing" and progress_text(fine) == ""


def test_graph_labels_are_entity_codes() -> None:
    graph = mermaid_graph({EVIL: [], 'a"b': [EVIL]}, {EVIL: JobState.COMPLETE})
    assert "<" not in graph.split("classDef")[0].replace("-->", "") and '"b' not in graph
    assert ":::complete" in graph and "t0 --> t1" in graph


async def test_plans_are_listed_with_their_progress(board: JobBoard) -> None:
    plan = Plan("nightly")
    first = plan.task("step", name="first")
    plan.task("step", name=EVIL, after=[first])
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            handle = await post_plan(board, plan)
            await shows(base, "/plans", handle.plan_id)
            body = (await ahttp("GET", f"{base}/plans/{handle.plan_id}"))[2]
            assert "0/2 done" in body and "mermaid-src" in body and "<script>window" not in body
            claim = await board.claim(handle.ids["first"], "w")
            await board.consume(claim, 1)
            await shows(base, f"/plans/{handle.plan_id}", "1/2 done")


async def test_jobs_are_filtered_and_paginated_on_the_server(board: JobBoard) -> None:
    from jobboard.board.contract import NewJob

    await board.post_many([NewJob("resize" if n % 2 else "notify", {"n": n}) for n in range(120)])
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            body = json.loads((await ahttp("GET", f"{base}/api/jobs?name=resize&page=2"))[2])
            assert (body["total"], body["pages"], body["page"], len(body["jobs"])) == (60, 2, 2, 10)
            assert {job["name"] for job in body["jobs"]} == {"resize"}
            page = (await ahttp("GET", f"{base}/jobs?state=claimed"))[2]
            assert "0 job(s) match" in page


async def test_metrics_are_mounted_when_the_module_is_there(board: JobBoard, monkeypatch: Any) -> None:
    async def metrics_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"jobboard_jobs 0\n"})

    module = types.ModuleType("jobboard.observe.metrics")
    module.asgi_app = lambda live: metrics_app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jobboard.observe.metrics", module)
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            status, _, body = await ahttp("GET", f"{base}/metrics")
            assert status == 200 and "jobboard_jobs" in body


async def test_the_board_collector_of_the_metrics_module_is_served(board: JobBoard, monkeypatch: Any) -> None:
    """The metrics branch's interface: ``jobboard.observe.metrics.BoardCollector(live)`` (prometheus_client)."""
    prometheus = pytest.importorskip("prometheus_client")
    from prometheus_client.core import GaugeMetricFamily

    class BoardCollector:
        def __init__(self, live: Any) -> None:
            self.live = live

        def collect(self) -> Any:
            yield GaugeMetricFamily("jobboard_board_up", "up", value=1.0 if self.live.healthy else 0.0)

    module = types.ModuleType("jobboard.observe.metrics")
    module.BoardCollector = BoardCollector  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jobboard.observe.metrics", module)
    assert prometheus.make_asgi_app
    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            status, headers, body = await ahttp("GET", f"{base}/metrics")
            assert status == 200 and "jobboard_board_up 1.0" in body and "text/plain" in headers["content-type"]


async def test_mermaid_is_served_from_the_package_not_a_cdn(board: JobBoard) -> None:
    from jobboard.dashboard.html import MERMAID

    with anyio.fail_after(30):
        async with dashboard_in_loop(board) as base:
            status, headers, body = await ahttp("GET", base + MERMAID)
            assert status == 200 and "javascript" in headers["content-type"] and "mermaid" in body[:100_000]
            licence = (await ahttp("GET", f"{base}/static/vendor/mermaid-LICENSE.txt"))[2]
            assert "MIT License" in licence
            for path in PAGES:
                assert "//cdn" not in (await ahttp("GET", base + path))[2]


def test_the_command_line_wants_a_token_for_actions() -> None:
    done = subprocess.run([sys.executable, "-m", "jobboard", "dashboard", "memory://x", "--allow-actions"],
                          check=False, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "needs a token" in done.stderr, done.stderr
