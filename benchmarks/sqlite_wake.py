"""Cross-process wake-ups on sqlite://: post in one process -> ``wait()`` returns in another; and the CPU an
idle worker (``jobboard worker``, nothing to do) costs.

    python -m benchmarks.sqlite_wake --posts 200 --idle 60 > docs/benchmarks/sqlite_wake.json

Latency: ``--waiters`` child processes each loop ``wait()`` -> ``claim_next`` -> consume; the parent posts one
job at a time (every 20-40 ms, so the children are asleep in ``wait()``) with its wall-clock time in the
details, and the child that claims it measures from that time to the moment its ``wait()`` returned
(one host, one clock). With several waiters, the post wakes one (the wake-one doorbell), and the count of
wake-ups that found nothing (``idle_wakes``) says whether others were woken for nothing.
Idle CPU: a ``jobboard worker`` process on an empty board, its user+system CPU over ``--idle`` seconds
(after 3 s of start-up), as a percentage of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from jobboard import open_board


async def waiter(url: str, count: int) -> None:
    latencies, idle_wakes = [], 0
    async with open_board(url) as board:
        print("ready", flush=True)
        while len(latencies) < count:
            jobs = await board.wait(names=["ping", "stop"])
            woke = time.time()
            claim = await board.claim_next("waiter", names=["ping", "stop"])
            if claim is None:
                idle_wakes += 1
                continue
            await board.consume(claim)
            if claim.job.name == "stop":
                break
            latencies.append(woke - float(claim.job.details["t"]))
            del jobs
    print(json.dumps({"latencies": latencies, "idle_wakes": idle_wakes}), flush=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latency(url: str, posts: int, waiters: int) -> dict[str, object]:
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-m", "benchmarks.sqlite_wake", "--child", url,
                                                  str(posts), stdout=asyncio.subprocess.PIPE)
             for _ in range(waiters)]
    for proc in procs:
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
    await asyncio.sleep(0.5)
    async with open_board(url) as board:
        for _ in range(posts):
            await asyncio.sleep(random.uniform(0.02, 0.04))
            await board.post("ping", {"t": time.time()})
        await asyncio.sleep(0.5)
        for _ in procs:
            await board.post("stop", {"t": time.time()})
        results = [json.loads((await proc.communicate())[0].decode().splitlines()[-1]) for proc in procs]
    samples = sorted(ms for r in results for ms in (x * 1000 for x in r["latencies"]))
    return {"waiters": waiters, "posts": posts, "woken": len(samples),
            "median_ms": round(statistics.median(samples), 3),
            "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 3),
            "max_ms": round(samples[-1], 3), "idle_wakes": sum(r["idle_wakes"] for r in results)}


def idle_cpu(url: str, seconds: float) -> dict[str, object]:
    proc = subprocess.Popen([sys.executable, "-m", "jobboard", "worker", url, "--handlers",
                             "tests.support.cli_handlers:handlers"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        before = cpu_seconds(proc.pid)
        time.sleep(seconds)
        used = cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(30)
    return {"seconds": seconds, "cpu_s": round(used, 3), "percent_of_a_core": round(100 * used / seconds, 3)}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(waiter(sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="jobboard-wake-")
    runs = [asyncio.run(latency(f"sqlite://{directory}/wake{n}.db", args.posts, n)) for n in (1, 4)]
    idle = idle_cpu(f"sqlite://{directory}/idle.db", args.idle) if args.idle > 0 else None
    print(json.dumps({"benchmark": "sqlite_wake", "load": os.getloadavg()[0], "latency": runs, "idle_worker": idle}))


if __name__ == "__main__":
    main()
