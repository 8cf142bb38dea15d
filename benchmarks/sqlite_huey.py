"""Huey's SQLite storage (``huey.storage.SqliteStorage``) on the same cycle, for the side-by-side in
docs/benchmarks.md: post N messages (``enqueue``), then W threads ``dequeue`` until none is left.

    python -m benchmarks.sqlite_huey --jobs 4000 --workers 16 --repeat 3

Huey's dequeue deletes the message as it hands it out (at most once: no claim, no fencing, a consumer
that dies loses it), so one dequeue is its whole cycle, where sqlite:// claims and then consumes.
Prints one JSON line (medians of --repeat runs, each on a fresh file). Needs ``pip install huey``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from typing import Any

from benchmarks.common import print_json_of


def one_run(jobs: int, workers: int) -> dict[str, float]:
    from huey.storage import SqliteStorage

    with tempfile.TemporaryDirectory() as directory:
        storage = SqliteStorage("bench", filename=os.path.join(directory, "huey.db"))
        payload = os.urandom(120)
        started = time.perf_counter()
        for _ in range(jobs):
            storage.enqueue(payload)
        posted = time.perf_counter() - started
        left = [jobs]
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                if storage.dequeue() is not None:
                    with lock:
                        left[0] -= 1

        threads = [threading.Thread(target=work) for _ in range(workers)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cycled = time.perf_counter() - started
    return {"posts_per_s": jobs / posted, "cycles_per_s": jobs / cycled}


def measure(jobs: int, workers: int, repeat: int) -> dict[str, Any]:
    runs = [one_run(jobs, workers) for _ in range(repeat)]
    return {"bench": "huey_sqlite", "jobs": jobs, "workers": workers,
            "median": {k: round(statistics.median(r[k] for r in runs)) for k in runs[0]}, "runs": runs}


if __name__ == "__main__":
    print_json_of("sqlite_huey", measure, url=False, jobs=4000, workers=16, repeat=3)
