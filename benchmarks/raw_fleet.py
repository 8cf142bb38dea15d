"""The raw two-request cycle in a fleet: what 1, 4 or 16 processes can do at all, without a board.

    python -m benchmarks.raw_fleet --jobs 2000 --rounds 3 --processes 1,4,16 --workers 16,64

The parent creates N job nodes; P processes (W/P coroutines each, on jobboard's own session,
``jobboard_zookeeper.zk``) then run, per job, ``create(locks/<job>, ephemeral)`` and one multi
deleting the lock and the job. The jobs are dealt out in advance (no two processes ever race
for one) and nothing is watched: no discovery, no fan-out, no contention. One ZooKeeper
server with fsync on, as in ``benchmarks.run``. Prints, per (W, P), the median cycles/s over
the rounds, its ratio to one process, and the client CPU ms per job, so that the fleet
figures of ``benchmarks.fleet`` can be read against what the server and the processes
allow on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
import uuid
from typing import Any

from jobboard_zookeeper.ops import Create, Delete
from jobboard_zookeeper.zk import ZooKeeper
from tests.support.zkserver import ZooKeeperServer

CHUNK = 500


async def _cycle(hosts: str, root: str, names: list[str], workers: int, queue: Any, go: Any) -> None:
    zk = ZooKeeper(hosts, session_timeout=10, connect_timeout=10)
    await zk.start()
    queue.put("ready")
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    cpu, started = time.process_time(), time.perf_counter()

    async def worker(mine: list[str]) -> None:
        for name in mine:
            await zk.multi([Create(f"{root}/locks/{name}", ephemeral=True)])
            await zk.multi([Delete(f"{root}/locks/{name}"), Delete(f"{root}/jobs/{name}")])

    await asyncio.gather(*(worker(names[index::workers]) for index in range(workers)))
    queue.put({"seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu})
    await zk.close()


def _child(hosts: str, root: str, names: list[str], workers: int, queue: Any, go: Any) -> None:
    asyncio.run(_cycle(hosts, root, names, workers, queue, go))


async def one_run(hosts: str, jobs: int, workers: int, processes: int) -> tuple[float, float]:
    """Cycles per second and client CPU ms per job of one run."""
    root = f"/bench-raw-fleet/{uuid.uuid4().hex[:8]}"
    zk = ZooKeeper(hosts, session_timeout=10, connect_timeout=10)
    await zk.start()
    await zk.ensure_path(f"{root}/jobs")
    await zk.ensure_path(f"{root}/locks")
    names = [f"j{index:07d}" for index in range(jobs)]
    for start in range(0, jobs, CHUNK):
        await zk.multi([Create(f"{root}/jobs/{name}") for name in names[start:start + CHUNK]])
    context = multiprocessing.get_context("spawn")
    queue, go = context.Queue(), context.Event()
    children = [context.Process(target=_child, args=(hosts, root, names[index::processes],
                                                     max(1, workers // processes), queue, go))
                for index in range(processes)]
    loop = asyncio.get_running_loop()
    for child in children:
        child.start()
    for _ in children:
        await loop.run_in_executor(None, queue.get)
    started = time.perf_counter()
    go.set()
    parts = [await loop.run_in_executor(None, queue.get) for _ in children]
    elapsed = time.perf_counter() - started
    for child in children:
        await loop.run_in_executor(None, child.join)
    await zk.close()
    return jobs / elapsed, 1000 * sum(part["cpu_s"] for part in parts) / jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="1,4,16")
    parser.add_argument("--workers", default="16,64")
    options = parser.parse_args(argv)
    configs = [(workers, processes) for workers in map(int, options.workers.split(","))
               for processes in map(int, options.processes.split(","))]
    results: dict[tuple[int, int], list[tuple[float, float]]] = {config: [] for config in configs}
    with ZooKeeperServer(fsync=True) as server:
        for _ in range(options.rounds):
            for workers, processes in configs:
                results[(workers, processes)].append(asyncio.run(one_run(server.hosts, options.jobs, workers,
                                                                         processes)))
    print("| W | P | raw cycles/s (runs) | × P=1 | client CPU ms/job |\n|---|---|---|---|---|")
    for (workers, processes), runs in results.items():
        median = statistics.median(rate for rate, _ in runs)
        one = statistics.median(rate for rate, _ in results.get((workers, 1), runs))
        print(f"| {workers} | {processes} | {median:.0f} ({', '.join(f'{rate:.0f}' for rate, _ in runs)}) | "
              f"{median / one:.2f} | {statistics.median(cpu for _, cpu in runs):.3f} |")


if __name__ == "__main__":
    main()
