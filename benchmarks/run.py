"""Run every benchmark against one fresh ZooKeeper server and write docs/benchmarks.md.

    python -m benchmarks.run                     # the default set (about 7 minutes on 2 cores)
    python -m benchmarks.run --quick             # one repetition, smaller sizes (a smoke run)

It starts a standalone ZooKeeper 3.8 on a free loopback port (forceSync on, as
ZooKeeper ships), runs each benchmark as its own process (``python -m
benchmarks.<name> ...``), keeps every JSON line in docs/benchmarks.json and
renders the medians, ranges and same-run ratios into docs/benchmarks.md, with the recorded
runs of other benchmarks (docs/benchmarks/*.json, ``benchmarks.recorded``) and an analysis
computed from the figures (``benchmarks.analysis``). ``--render-from docs/benchmarks.json``
renders the report again from the committed files (tests/docs/test_benchmark_report.py checks it).
Systems are interleaved: each round runs every system once (one repetition),
and the rounds repeat, so that a slow minute on a shared machine hits all of
them; the medians are over the rounds. Backlog scaling and plans run once at
the end with their own repetitions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.recorded import recorded_sections
from benchmarks.report import render
from tests.support.zkserver import ZooKeeperServer, ensure_zookeeper_installed

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "docs" / "benchmarks"
"""The recorded runs of other benchmarks, one JSON file per section of the report."""
COMPANION = ROOT / "docs" / "benchmarks-2000-jobs.json"
"""The same set at 2000 jobs per system, which the report's analysis reads beside the run's own."""


@dataclass
class Plan:
    """What one run of the whole set does."""

    repeat: int = 3
    jobs: int = 1000
    taskflow_jobs: int = 1000
    kazoo_jobs: int = 1000
    workers: tuple[int, ...] = (1, 4, 16, 64)
    fleet_workers: tuple[int, ...] = (16, 64)
    processes: tuple[int, ...] = (4, 16)
    """Besides one process (the plain rows at the same W)."""
    partitions: int = 16
    """The fleet rows run again on a board created with ``?partitions=K`` (docs/backends/zookeeper.md)."""
    taskflow_workers: tuple[int, ...] = (1, 16)
    backlogs: str = "1000,10000,50000"
    commands: list[list[str]] = field(default_factory=list)


def benchmarks(plan: Plan, hosts: str, zk_pid: int) -> list[list[str]]:
    """The commands of one round (one repetition of each system, interleaved), in the order they run."""
    common = ["--repeat", "1"]
    ours = ["--hosts", hosts, "--jobs", str(plan.jobs), "--zk-pid", str(zk_pid), *common]
    commands = [["cycle", "--url", "memory://bench", "--jobs", str(plan.jobs), "--workers", "16", *common]]
    for w in plan.workers:
        commands += [["cycle", *ours, "--workers", str(w)]]
        commands += [["peers.aiozk_ceiling", "--client", client, "--hosts", hosts, "--jobs", str(plan.jobs),
                      "--zk-pid", str(zk_pid), "--workers", str(w), *common] for client in ("fixed", "stock")]
    commands += [["cycle", *ours, "--workers", str(w), "--processes", str(p)]
                 for w in plan.fleet_workers for p in plan.processes]
    commands += [["cycle", *ours, "--workers", str(w), "--processes", str(p), "--partitions", str(plan.partitions)]
                 for w in plan.fleet_workers for p in plan.processes]
    commands += [["cycle", *ours, "--workers", "16", "--interleaved"]]
    commands += [["peers.taskflow_board", "--hosts", hosts, "--zk-pid", str(zk_pid), "--jobs", str(plan.taskflow_jobs),
                  "--workers", str(w), *common] for w in plan.taskflow_workers]
    commands += [["peers.kazoo_queue", "--hosts", hosts, "--zk-pid", str(zk_pid), "--jobs", str(plan.kazoo_jobs),
                  "--workers", str(w), *common] for w in (1, 4, 16)]
    commands += [["batches", "--url", f"zookeeper://{hosts}/bench/batches", "--jobs", "10000", "--batch", "2000",
                  "--workers", "16", *common]]
    return commands


def once(plan: Plan, hosts: str) -> list[list[str]]:
    """Benchmarks with their own repetitions inside, run once after the rounds (they take longest)."""
    common = ["--repeat", str(plan.repeat)]
    return [["scaling", "--hosts", hosts, "--backlogs", plan.backlogs, *common],
            ["dag", "--hosts", hosts, "--workers", "4", *common],
            ["redis_fleet", "--processes", ",".join(map(str, (1, *plan.processes))), "--rounds", str(plan.repeat),
             "--jobs", str(plan.jobs)]]  # its own redis-server; interleaved rounds inside


def merge(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One result per command: the runs of every round together, their median and range."""
    from benchmarks.common import median_of

    merged = []
    for results in zip(*rounds, strict=True):
        ok = [result for result in results if "error" not in result]
        if not ok:
            merged.append(results[0])
            continue
        runs = [run for result in ok for run in result.get("runs", [])]
        first = dict(ok[0])
        first.update(runs=runs, repeat=len(runs), median=median_of(runs) if runs else first.get("median", {}),
                     seconds=round(sum(result.get("seconds", 0) for result in ok), 1))
        first["command"] = [part if part != "1" or first["command"][index - 1] != "--repeat" else str(len(ok))
                            for index, part in enumerate(first["command"])]
        merged.append(first)
    return merged


def run_one(args: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", f"benchmarks.{args[0]}", *args[1:]]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"bench": args[0], "error": (done.stderr or done.stdout)[-2000:], "command": args}
    result: dict[str, Any] = json.loads(lines[-1])
    result["command"] = ["python", "-m", f"benchmarks.{args[0]}", *args[1:]]
    result["seconds"] = round(time.monotonic() - started, 1)
    print(f"  {' '.join(args)}: {result['seconds']}s", file=sys.stderr, flush=True)
    return result


def machine_facts(server: ZooKeeperServer) -> dict[str, str]:
    def read(command: list[str]) -> str:
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    memory = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {"cpu": cpu, "cores": read(["nproc"]), "memory": f"{int(memory) // 1024 // 1024} GiB",
            "python": sys.version.split()[0], "zookeeper": _zk_version(server),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": load_average()}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _zk_version(server: ZooKeeperServer) -> str:
    from tests.support.zkserver import four_letter

    first = four_letter(server.port, "srvr").splitlines()[0]
    return first.split(":", 1)[1].strip().split("-")[0] if ":" in first else first


def read_results(source: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A results file's header (its first line: facts and command) and its results."""
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    header: dict[str, Any] = lines[0] if "facts" in lines[0] else {"facts": {}, "command": "python -m benchmarks.run"}
    return header, [line for line in lines if "facts" not in line]


def report_of(source: Path, recorded: Path = RECORDED, companion: Path = COMPANION) -> str:
    """The report of a results file, with the recorded sections and the companion run beside it."""
    header, results = read_results(source)
    other = read_results(companion) if companion.exists() and companion.resolve() != source.resolve() else None
    return render(results, header["facts"], header["command"], recorded=recorded_sections(recorded), companion=other)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, smaller sizes")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run, for every system (default 1000)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--render-from", metavar="JSON", help="only re-render the report from a results file")
    options = parser.parse_args(argv)
    if options.render_from:
        Path(options.out).write_text(report_of(Path(options.render_from)))
        return 0
    plan = Plan()
    if options.quick:
        plan = Plan(repeat=1, jobs=500, taskflow_jobs=100, kazoo_jobs=200, backlogs="1000,10000", workers=(1, 16),
                    processes=(4,))
    if options.jobs:
        plan.jobs = plan.taskflow_jobs = plan.kazoo_jobs = options.jobs
    ensure_zookeeper_installed()
    with ZooKeeperServer(fsync=True) as server:
        assert server.pid is not None
        facts = machine_facts(server)
        rounds = []
        for round_number in range(plan.repeat):
            print(f"round {round_number + 1} of {plan.repeat}", file=sys.stderr, flush=True)
            rounds.append([run_one(args) for args in benchmarks(plan, server.hosts, server.pid)])
        results = merge(rounds) + [run_one(args) for args in once(plan, server.hosts)]
        facts["load_end"] = load_average()
    out = Path(options.out)
    command = " ".join(["python", "-m", "benchmarks.run", *(argv or sys.argv[1:])])
    lines = [json.dumps({"facts": facts, "command": command}), *(json.dumps(result) for result in results)]
    out.with_suffix(".json").write_text("\n".join(lines) + "\n")
    out.write_text(report_of(out.with_suffix(".json")))
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0 if all("error" not in result for result in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
