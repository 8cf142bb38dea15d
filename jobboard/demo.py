"""The README's main job: a dependency plan run by three worker processes sharing a ``sqlite://`` board.

Run it with ``python -m jobboard demo``. It builds a plan of 27 tasks (download
eight images, make a thumbnail and a tag list of each, build two albums, publish
them), posts it as linked jobs on a board in a file of a temporary directory, starts
three ``jobboard worker`` processes on that file (no server), shows progress, stops
the workers with SIGTERM and prints the result. One download fails on its first
attempt and is retried. ``python -m jobboard demo --in-process`` runs the same plan
on three in-process workers on a ``memory://`` board.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from typing import Any

import anyio

from jobboard import open_board
from jobboard.cli.plan import ProgressPrinter
from jobboard.plans.dag import Plan
from jobboard.plans.posting import post_plan
from jobboard.worker.conductor import Worker, WorkerConfig
from jobboard.worker.handlers import Handlers, Retry

BOARD_URL = "memory://demo"
WORKERS = 3
DIRECTORY_ENV = "JOBBOARD_DEMO_DIR"
IMAGES = [f"img-{index:02d}.png" for index in range(8)]
handlers = Handlers()
_flaky_failed: set[str] = set()


@handlers.task("download")
async def download(image: str) -> dict[str, Any]:
    await anyio.sleep(random.uniform(0.02, 0.06))
    if image == "img-03.png" and _first_try(image):
        raise Retry(0.1, "server busy")
    return {"image": image, "bytes": 20_000 + 1_000 * len(image)}


def _first_try(image: str) -> bool:
    """Once per demo run, across the worker processes (a marker file in ``$JOBBOARD_DEMO_DIR``) or in this one."""
    directory = os.environ.get(DIRECTORY_ENV)
    if directory is None:
        first = image not in _flaky_failed
        _flaky_failed.add(image)
        return first
    try:
        with open(os.path.join(directory, f"{image}.failed-once"), "x"):
            return True
    except FileExistsError:
        return False


@handlers.task("thumbnail")
async def thumbnail(size: int, original: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(random.uniform(0.02, 0.06))
    return {"image": original["image"], "bytes": original["bytes"] * size // 1024}


@handlers.task("tag")
async def tag(original: dict[str, Any]) -> list[str]:
    await anyio.sleep(random.uniform(0.01, 0.03))
    return ["cat" if int(original["image"][4:6]) % 2 else "dog", "outdoor"]


@handlers.task("album")
async def album(title: str, *parts: Any) -> dict[str, Any]:
    thumbnails, tags = parts[: len(parts) // 2], parts[len(parts) // 2:]
    return {"title": title, "images": len(thumbnails),
            "bytes": sum(t["bytes"] for t in thumbnails), "tags": sorted({t for ts in tags for t in ts})}


@handlers.task("publish")
async def publish(*albums: dict[str, Any]) -> str:
    return ", ".join(f"{a['title']} ({a['images']} images, {a['bytes']} bytes)" for a in albums)


def build_plan() -> Plan:
    """27 tasks: 8 downloads, 8 thumbnails, 8 tag lists, 2 albums, 1 publish."""
    plan = Plan("thumbnails")
    thumbs, tags = [], []
    for image in IMAGES:
        original = plan.task("download", image, name=f"download {image}")
        thumbs.append(plan.task("thumbnail", 128, name=f"thumbnail {image}", after=[original]))
        tags.append(plan.task("tag", name=f"tag {image}", after=[original]))
    albums = [plan.task("album", title, name=f"album {title}", after=[*thumbs[i::2], *tags[i::2]])
              for i, title in enumerate(("even", "odd"))]
    plan.task("publish", name="publish", after=albums)
    return plan


def announce(plan: Plan, where: str) -> None:
    print(f"plan {plan.name!r}: {len(plan.tasks)} tasks (8 downloads -> 8 thumbnails + 8 tag lists "
          f"-> 2 albums -> publish), {WORKERS} {where}")


async def run_on_processes() -> None:
    """The plan on :data:`WORKERS` ``jobboard worker`` processes sharing a ``sqlite://`` file board."""
    plan = build_plan()
    with tempfile.TemporaryDirectory(prefix="jobboard-demo-") as directory:
        url = f"sqlite://{directory}/demo.db"
        announce(plan, f"worker processes on {url}")
        async with open_board(url) as board:
            handle = await post_plan(board, plan)
            command = [sys.executable, "-m", "jobboard", "worker", url, "--handlers", "jobboard.demo:handlers",
                       "--concurrency", "2", "--log-level", "info"]
            environment = {**os.environ, DIRECTORY_ENV: directory}
            workers = [await anyio.open_process([*command, "--owner", f"worker-{n}"], stdin=subprocess.DEVNULL,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment)
                       for n in range(1, WORKERS + 1)]
            printer = ProgressPrinter(sys.stdout, prefix="  ")
            try:
                with anyio.fail_after(60):
                    outcome = await handle.wait(on_progress=printer)
            finally:
                printer.finish()
                for worker in workers:
                    worker.terminate()  # SIGTERM: each drains and says what it did
                for worker in workers:
                    print(await last_words(worker))
            print(f"plan {outcome.state}: {len(outcome.results)} of {len(plan.tasks)} tasks done")
            print(f"published: {outcome.results['publish']}")
            print(f"jobs left on the board: {await board.job_count()}")


async def last_words(worker: anyio.abc.Process) -> str:
    """A stopped worker process's summary line (``worker-1 stopped after ...: N jobs: ...``)."""
    assert worker.stderr is not None
    text = b""
    with anyio.fail_after(30):
        async for chunk in worker.stderr:
            text += chunk
        status = await worker.wait()
    lines = [line for line in text.decode(errors="replace").splitlines() if " stopped after " in line]
    return lines[-1].split(": ", 1)[-1] if lines else f"a worker exited with status {status}: {text[-300:]!r}"


async def run_demo() -> None:
    """The plan on :data:`WORKERS` in-process workers on a ``memory://`` board."""
    plan = build_plan()
    announce(plan, "in-process workers")
    async with open_board(BOARD_URL) as board:
        handle = await post_plan(board, plan)
        workers = [Worker(board, handlers, WorkerConfig(owner=f"worker-{n}", concurrency=2))
                   for n in range(1, WORKERS + 1)]
        printer = ProgressPrinter(sys.stdout, prefix="  ")
        with anyio.fail_after(60):
            outcome = await handle.run_on(workers, on_progress=printer)
        printer.finish()
        for worker in workers:
            print(f"{worker.owner}: {worker.stats.consumed} tasks, {worker.stats.abandoned} retried")
        print(f"plan {outcome.state}: {len(outcome.results)} of {len(plan.tasks)} tasks done")
        print(f"published: {outcome.results['publish']}")
        print(f"jobs left on the board: {await board.job_count()}")


def main() -> int:
    anyio.run(run_on_processes)
    return 0


def main_in_process() -> int:
    anyio.run(run_demo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
