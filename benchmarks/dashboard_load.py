"""Dashboard page-load times with many jobs on the board, measured in headless Chromium.

    python -m tests.support.zkserver run -- python -m benchmarks.dashboard_load \
        --url memory://bench --url 'zookeeper://$JOBBOARD_ZK_HOSTS/bench-dash' [--jobs 50000]

For each board: posts ``--jobs`` jobs (``post_many``: four names, three priorities), starts the
dashboard in this process (memory:// is per process), then loads each page ``--repeat`` times in the
browser: the navigation time until the load event (the pages are rendered on the server: loaded is
shown), and the live refresh of the page's content (the fetch app.js makes on each change). Prints
one JSON line per board: medians in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from jobboard import JobBoard, NewJob, open_board
from tests.support.browser import ensure_chromium_installed, headless_chromium
from tests.support.dashboard import dashboard_in_loop

NAMES = ("resize", "notify", "report", "publish")
PRIORITIES = ("low", "normal", "high")
NAVIGATION = "const n = performance.getEntriesByType('navigation')[0]; return [n.responseEnd, n.loadEventEnd]"
REFRESH = """const done = arguments[arguments.length - 1]; const t = performance.now();
fetch(location.href, {headers: {'X-Fragment': '1'}}).then(r => r.text()).then(() => done(performance.now() - t));"""


async def fill(board: JobBoard, jobs: int, batch: int = 1000) -> float:
    started = time.perf_counter()
    for first in range(0, jobs, batch):
        await board.post_many([NewJob(NAMES[n % 4], {"n": n, "text": "x" * 40}, priority=PRIORITIES[n % 3])
                               for n in range(first, min(jobs, first + batch))])
    return time.perf_counter() - started


def pages(jobs: int, some_id: str) -> dict[str, str]:
    last = -(-jobs // 4 // 50)
    return {"overview": "/", "jobs": "/jobs", "jobs, one name, last page": f"/jobs?name=report&page={last}",
            "jobs, claimed (none)": "/jobs?state=claimed", "job": f"/jobs/{some_id}", "workers": "/workers"}


def measure(driver: Any, base: str, paths: dict[str, str], repeat: int, board: JobBoard) -> dict[str, Any]:
    """Per page: medians of the load (idle board), and of the load right after a post (the figures
    of the view are computed again: the cost of a busy board)."""
    results: dict[str, Any] = {}
    for label, path in paths.items():
        loads, responses, refreshes, changed = [], [], [], []
        for _ in range(repeat):
            driver.get(base + path)
            response_end, load_end = driver.execute_script(NAVIGATION)
            responses.append(response_end)
            loads.append(load_end)
            refreshes.append(driver.execute_async_script(REFRESH))
            anyio.from_thread.run(board.post, "one-more")
            time.sleep(0.2)  # the view has read it
            driver.get(base + path)
            changed.append(driver.execute_script(NAVIGATION)[1])
        results[label] = {"load_ms": round(statistics.median(loads)), "response_ms": round(statistics.median(responses)),
                          "refresh_ms": round(statistics.median(refreshes)),
                          "load_after_change_ms": round(statistics.median(changed))}
    return results


async def one_board(url: str, jobs: int, repeat: int, driver: Any) -> dict[str, Any]:
    async with open_board(url) as board:
        posting = await fill(board, jobs)
        some = [job async for job in board.iterjobs()][jobs // 2]
        started = time.perf_counter()
        async with dashboard_in_loop(board) as base:
            ready = time.perf_counter() - started
            results = await anyio.to_thread.run_sync(measure, driver, base, pages(jobs, some.id), repeat, board)
        return {"url": url.split("?")[0], "jobs": jobs, "post_s": round(posting, 1),
                "dashboard_ready_s": round(ready, 2), "pages": results}


async def main(urls: list[str], jobs: int, repeat: int) -> None:
    ensure_chromium_installed()
    with headless_chromium() as driver:
        for url in urls:
            url = url.replace("$JOBBOARD_ZK_HOSTS", os.environ.get("JOBBOARD_ZK_HOSTS", "127.0.0.1:2181"))
            url = url.rstrip("/") + f"-{uuid.uuid4().hex[:8]}" if url.startswith("zookeeper") else url
            print(json.dumps(await one_board(url, jobs, repeat, driver)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    anyio.run(main, options.url, options.jobs, options.repeat)
