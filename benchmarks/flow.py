"""Flow control's cost when it does not bind (issue 27): claim cycles with limits configured, against none.

    python -m benchmarks.flow [--url memory://] [--jobs 3000] [--rounds 7] [--rate 10000/0.05s]

Each round runs every variant once, interleaved (the order rotates), each on a fresh board: ``--jobs``
jobs of one group are posted (``post_many``, not timed), then one claimer claims and consumes them
one by one (``claim_next`` + ``consume``, timed). The variants:

- ``none``: the jobs carry the group, no limit is set;
- ``limit``: the group has ``concurrency=1000`` (one claimer holds at most one job: never binding) and
  another job name is paused (so the claim paths consult flow control);
- ``limit+rate``: the same plus ``rate`` (``--rate``, far above the cycle rate: never binding).

Prints one JSON line per variant (cycles per second by the wall clock and by the process's CPU time:
median, min, max over the rounds; the ratio of medians to ``none``; each round's ratio) and one with the load average before and after. ``--url`` takes any backend's URL
prefix (a uuid is appended per board: ``sqlite:///tmp/flow.db?board=`` works).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

from jobboard import NewJob, open_board
from jobboard.board.limits import parse_rate

GROUP = "tenant"
VARIANTS = ("none", "limit", "limit+rate")


async def one_run(url: str, variant: str, jobs: int, rate: str) -> tuple[float, float]:
    """Claim cycles per second of one variant on a fresh board: by the wall clock, and by this process's
    CPU time (less moved by the other processes of a shared machine; on memory:// all the work is here)."""
    async with open_board(f"{url}{uuid.uuid4().hex}") as board:
        if variant != "none":
            await board.set_limit(GROUP, concurrency=1000, rate=parse_rate(rate) if variant == "limit+rate" else None)
            await board.pause("some-other-name")
        for start in range(0, jobs, 500):
            await board.post_many([NewJob("work", group=GROUP) for _ in range(start, min(jobs, start + 500))])
        began, cpu = time.perf_counter(), time.process_time()
        done = 0
        while (claim := await board.claim_next("bench")) is not None:
            await board.consume(claim)
            done += 1
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        assert done == jobs, (variant, done)
        return jobs / elapsed, jobs / cpu


async def main(url: str, jobs: int, rounds: int, rate: str) -> None:
    load_before = os.getloadavg()
    results: dict[str, list[tuple[float, float]]] = {variant: [] for variant in VARIANTS}
    for round_number in range(rounds):
        order = VARIANTS[round_number % 3:] + VARIANTS[:round_number % 3]
        for variant in order:
            results[variant].append(await one_run(url, variant, jobs, rate))
    for variant, runs in results.items():
        record: dict[str, object] = {"url": url, "variant": variant, "jobs": jobs, "rounds": rounds}
        for clock, index in (("wall", 0), ("cpu", 1)):
            rates = [run[index] for run in runs]
            base = [run[index] for run in results["none"]]
            median = statistics.median(rates)
            record[f"{clock}_cycles_per_s"] = {"median": round(median), "min": round(min(rates)),
                                               "max": round(max(rates))}
            record[f"{clock}_ratio_to_none"] = round(median / statistics.median(base), 3)
            record[f"{clock}_per_round_ratio"] = [round(r / n, 3) for r, n in zip(rates, base, strict=True)]
        print(json.dumps(record))
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="memory://flow-bench-")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate", default="10000/0.05s", help="the rate of limit+rate (never binding)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.url, arguments.jobs, arguments.rounds, arguments.rate))
