"""A fleet of claiming processes, flat against partitioned zookeeper:// boards, in interleaved rounds.

    python -m benchmarks.fleet --jobs 2000 --rounds 3 --processes 1,4,16 --workers 16,64 --partitions 16

Each round runs ``benchmarks.cycle`` once for every (W, P, layout), on one ZooKeeper server
(fsync on, as in ``benchmarks.run``, unless ``--no-fsync``); the table shows medians over the rounds: cycles/s, its ratio to one process of
the same layout and W, the notifications each process receives per job of the board, the
server's notifications and requests per cycle, CPU ms per job in the claiming processes and
in the server, and the jobs claimed by stealing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from tests.support.zkserver import ZooKeeperServer

FIELDS = ("cycles_per_s", "notifications_per_job_per_process", "server_notifications_per_cycle",
          "server_requests_per_cycle", "cpu_ms_per_job", "zk_cpu_ms_per_job", "steals")


def run(hosts: str, pid: int, jobs: int, workers: int, processes: int, partitions: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.cycle", "--hosts", hosts, "--zk-pid", str(pid), "--jobs", str(jobs),
               "--workers", str(workers), "--processes", str(processes), "--repeat", "1"]
    command += ["--partitions", str(partitions)] if partitions else []
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    median: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["median"]
    return median


def table(results: dict[tuple[int, int, int], list[dict[str, Any]]]) -> str:
    lines = [("| W | P | layout | cycles/s | × P=1 | notif./job/process | server notif./cycle | server req./cycle "
             "| client CPU ms/job | server CPU ms/job | steals |"), "|" + "---|" * 11]
    medians = {key: {field: statistics.median(float(run.get(field) or 0) for run in runs) for field in FIELDS}
               for key, runs in results.items()}
    for (workers, processes, partitions), found in sorted(medians.items()):
        one = medians.get((workers, 1, partitions), found)["cycles_per_s"]
        layout = f"K={partitions}" if partitions else "flat"
        lines.append(f"| {workers} | {processes} | {layout} | {found['cycles_per_s']:.0f} | "
                     f"{found['cycles_per_s'] / one:.2f} | {found['notifications_per_job_per_process']:.2f} | "
                     f"{found['server_notifications_per_cycle']:.2f} | {found['server_requests_per_cycle']:.2f} | "
                     f"{found['cpu_ms_per_job']:.3f} | {found['zk_cpu_ms_per_job']:.3f} | {found['steals']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="1,4,16")
    parser.add_argument("--workers", default="16,64")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--no-fsync", action="store_true", help="the server does not fsync its log (forceSync=no)")
    options = parser.parse_args(argv)
    configs = [(workers, processes, partitions)
               for workers in map(int, options.workers.split(","))
               for processes in map(int, options.processes.split(","))
               for partitions in (0, options.partitions)]
    results: dict[tuple[int, int, int], list[dict[str, Any]]] = {config: [] for config in configs}
    with ZooKeeperServer(fsync=not options.no_fsync) as server:
        assert server.pid is not None
        for round_number in range(options.rounds):
            for config in configs:
                results[config].append(run(server.hosts, server.pid, options.jobs, *config))
                print(f"round {round_number + 1}: W, P, K = {config}: {results[config][-1]['cycles_per_s']} "
                      "cycles/s", file=sys.stderr, flush=True)
    print(json.dumps({"runs": {str(key): runs for key, runs in results.items()}}))
    print(table(results))


if __name__ == "__main__":
    main()
