"""postgresql:// and the fleet rule: what each worker process pays per job it runs, with 1, 4 and 8 processes.

    python -m benchmarks.postgresql_fleet --url postgresql://postgres@127.0.0.1:5432/postgres --jobs 1500

Each round starts P processes, each one board and one claimer looping ``claim_next`` -> ``consume`` and,
when it finds nothing, ``wait()``; the parent posts ``--jobs`` jobs one at a time at ``--rate`` a second
(a trickle: the claimers are idle between jobs, the worst case for wake-ups). Every process counts the
jobs it ran, the NOTIFYs its session received (``w``: a wake-up), its ``claim_next`` calls that found
nothing, and its ``wait()`` calls. One JSON line per P: totals, and per job run, medians over processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import uuid
from typing import Any

from jobboard import open_board
from jobboard_postgresql.keeper import Keeper


async def worker(url: str) -> dict[str, int]:
    counts = {"ran": 0, "wakeups": 0, "empty_claims": 0, "waits": 0}
    heard = Keeper._message

    def counting(self: Keeper, payload: str) -> None:
        counts["wakeups"] += payload == "w"
        heard(self, payload)

    Keeper._message = counting  # type: ignore[method-assign]  # this process's count of its NOTIFYs
    stopping = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(None, sys.stdin.read))
    async with open_board(url) as board:
        while not stopping.done():  # until the parent closes our stdin
            claim = await board.claim_next("fleet")
            if claim is None:
                counts["empty_claims"] += 1
                counts["waits"] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(board.wait(), 0.5)
                continue
            await board.consume(claim)
            counts["ran"] += 1
    return counts


async def fleet(url: str, processes: int, jobs: int, rate: float) -> dict[str, Any]:
    board_url = f"{url}{'&' if '?' in url else '?'}board=fleet-{uuid.uuid4().hex[:8]}"
    children = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.postgresql_fleet", "--child", board_url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE) for _ in range(processes)]
    await asyncio.sleep(2.0)  # every child is waiting
    async with open_board(board_url) as poster:
        for _ in range(jobs):
            await poster.post("fleet")
            await asyncio.sleep(1 / rate)
        for _ in range(600):  # until the board is empty, 60 s at most
            if not await poster.job_count():
                break
            await asyncio.sleep(0.1)
        outputs = [json.loads((await asyncio.wait_for(child.communicate(b""), 30))[0]) for child in children]
        left = await poster.job_count()
    ran = [o["ran"] for o in outputs]

    def per_job(key: str) -> float:
        return round(statistics.median(o[key] / o["ran"] for o in outputs if o["ran"]), 3)

    return {"processes": processes, "jobs": jobs, "ran": sum(ran), "left": left, "ran_per_process": ran,
            "wakeups_per_job_run": per_job("wakeups"), "empty_claims_per_job_run": per_job("empty_claims"),
            "waits_per_job_run": per_job("waits"), "wakeups_total_per_job": round(
                sum(o["wakeups"] for o in outputs) / max(1, sum(ran)), 3)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgresql_fleet")
    parser.add_argument("--url")
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=150.0)
    parser.add_argument("--processes", default="1,4,8")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(worker(args.child))))
    else:
        for count in (int(p) for p in args.processes.split(",")):
            print(json.dumps(asyncio.run(fleet(args.url, count, args.jobs, args.rate))), flush=True)
