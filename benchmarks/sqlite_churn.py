"""The WAL of a sqlite:// file under churn: does it stay bounded while processes post, claim and consume?

    python -m benchmarks.sqlite_churn --minutes 10 --workers 2 > docs/benchmarks/sqlite_churn.json

One poster process keeps a backlog of about ``--backlog`` jobs (``post_many`` of 100), ``--workers``
worker processes claim and consume (``consume_and_claim_next``, 8 claimers each). Every ``--hold-every``
seconds a plain reader holds one read transaction open for ``--hold`` seconds (checkpoint starvation: no
checkpoint can pass it). Every 5 s the sizes of the database, its ``-wal`` and ``-shm`` files, and the
jobs consumed so far are sampled. One JSON line: the samples, the largest WAL while a reader held it and
while none did, and the sizes at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sqlite3
import tempfile
import time
from typing import Any

from jobboard import NewJob, open_board


def size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


async def poster(url: str, until: float, backlog: int) -> None:
    async with open_board(url) as board:
        while time.time() < until:
            if await board.job_count() < backlog:
                await board.post_many([NewJob("churn", {"pad": "x" * 200}) for _ in range(100)])
            else:
                await asyncio.sleep(0.02)


async def worker(url: str, until: float, consumed: Any) -> None:
    async with open_board(url) as board:

        async def claimer() -> None:
            claim = None
            while time.time() < until:
                if claim is None:
                    claim = await board.claim_next("churn")
                    if claim is None:
                        await asyncio.sleep(0.01)
                        continue
                claim = await board.consume_and_claim_next(claim, {"ok": True})
                with consumed.get_lock():
                    consumed.value += 1

        await asyncio.gather(*(claimer() for _ in range(8)))


def run(target: Any, *args: Any) -> None:
    asyncio.run(target(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--hold", type=float, default=20.0)
    parser.add_argument("--hold-every", type=float, default=120.0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="jobboard-churn-")
    db = os.path.join(directory, "churn.db")
    url = f"sqlite://{db}?board=churn"
    until = time.time() + args.minutes * 60
    consumed = multiprocessing.Value("q", 0)
    procs = [multiprocessing.Process(target=run, args=(poster, url, until, args.backlog))]
    procs += [multiprocessing.Process(target=run, args=(worker, url, until, consumed)) for _ in range(args.workers)]
    for proc in procs:
        proc.start()
    samples, started, reader, held_since = [], time.time(), None, None
    while time.time() < until:
        time.sleep(5)
        elapsed = time.time() - started
        if reader is None and elapsed % args.hold_every < 5 and elapsed > 5:
            reader = sqlite3.connect(db, isolation_level=None)
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM jb_job").fetchone()  # the snapshot is held from here
            held_since = elapsed
        elif reader is not None and held_since is not None and elapsed - held_since >= args.hold:
            reader.execute("COMMIT")
            reader.close()
            reader = None
        samples.append({"t": round(elapsed), "db": size(db), "wal": size(db + "-wal"), "shm": size(db + "-shm"),
                        "consumed": consumed.value, "reader_holding": reader is not None})
    for proc in procs:
        proc.join(60)
    # a hold spans the samples taken while it held and the one taken as it was released
    in_hold = {i for i, s in enumerate(samples) if s["reader_holding"]}
    in_hold |= {i + 1 for i in in_hold}
    held = [s["wal"] for i, s in enumerate(samples) if i in in_hold]
    free = [s["wal"] for i, s in enumerate(samples) if i not in in_hold]
    print(json.dumps({
        "benchmark": "sqlite_churn", "minutes": args.minutes, "workers": args.workers, "backlog": args.backlog,
        "hold_s": args.hold, "hold_every_s": args.hold_every, "consumed": consumed.value,
        "cycles_per_s": round(consumed.value / (args.minutes * 60)),
        "max_wal_reader_holding": max(held, default=0), "max_wal_no_reader": max(free, default=0),
        "end": {"db": size(db), "wal": size(db + "-wal"), "shm": size(db + "-shm")},
        "exit_codes": [proc.exitcode for proc in procs], "samples": samples,
    }))


if __name__ == "__main__":
    main()
