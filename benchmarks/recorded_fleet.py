"""The recorded fleet runs (``benchmarks.fleet``, ``benchmarks.raw_fleet``): their tables, and what they show,
computed from their figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.fleet import table
from benchmarks.lookup import span

Run = dict[str, Any]
Rows = dict[tuple[int, int, int], dict[str, Any]]


def keyed(run: Run) -> Rows:
    return {(row["workers"], row["processes"], row["partitions"]): row for row in run["output"]["medians"]}


def fleet_table(run: Run) -> list[str]:
    """The run's table, as ``benchmarks.fleet`` prints it (medians of one row are the row)."""
    return table({key: [row] for key, row in keyed(run).items()}).splitlines()


def pairs(runs: list[Run], processes: tuple[int, ...]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(flat, partitioned) rows at the same W and P, over every run."""
    found = []
    for rows in map(keyed, runs):
        found += [(rows[(w, p, 0)], rows[(w, p, k)]) for (w, p, k) in rows if k and p in processes and (w, p, 0) in rows]
    return found


def to_one(runs: list[Run], processes: int, partitioned: bool | None = None) -> list[float]:
    """cycles/s ÷ one process of the same layout and W, over every run (both layouts unless ``partitioned``)."""
    found = []
    for rows in map(keyed, runs):
        found += [row["cycles_per_s"] / rows[(w, 1, k)]["cycles_per_s"] for (w, p, k), row in rows.items()
                  if p == processes and (w, 1, k) in rows and (partitioned is None or bool(k) == partitioned)]
    return found


def figures(runs: list[Run], key: str, processes: tuple[int, ...], partitioned: bool) -> list[float]:
    return [float(row[key]) for rows in map(keyed, runs) for (_, p, k), row in rows.items()
            if p in processes and bool(k) == partitioned]


def notifications(runs: list[Run]) -> str:
    def of(processes: tuple[int, ...], partitioned: bool, key: str = "notifications_per_job_per_process") -> str:
        return span(figures(runs, key, processes, partitioned), ".2f")

    server = "server_notifications_per_cycle"
    return (f"- **Notifications follow a process's own work.** Partitioned, a process received {of((4,), True)} "
            f"notifications per job of the board with 4 processes and {of((16,), True)} with 16, against "
            f"{of((1,), True)} alone, and the server sent {of((1, 4, 16), True, server)} per cycle whatever the "
            f"processes; flat, it sent {of((4,), False, server)} with 4 processes and {of((16,), False, server)} "
            "with 16.")


def cpu_and_throughput(runs: list[Run]) -> list[str]:
    client = [k["cpu_ms_per_job"] / f["cpu_ms_per_job"] for f, k in pairs(runs, (4, 16))]
    server = [k["zk_cpu_ms_per_job"] / f["zk_cpu_ms_per_job"] for f, k in pairs(runs, (16,))]
    rates = {p: [k["cycles_per_s"] / f["cycles_per_s"] for f, k in pairs(runs, (p,))] for p in (4, 16)}
    return [(f"- **CPU per job, partitioned ÷ flat** at the same W and processes: client {span(client, '.2f')} "
             f"(4 and 16 processes), server {span(server, '.2f')} (16 processes)."),
            (f"- **Throughput, partitioned ÷ flat** at the same W and processes: {span(rates[16], '.2f')}× with 16 "
             f"processes, {span(rates[4], '.2f')}× with 4.")]


def against_one(runs: list[Run]) -> str:
    four, sixteen = to_one(runs, 4), to_one(runs, 16)
    reached = sum(r >= 1.0 for r in four)
    verdict = "met" if min(sixteen) >= 0.8 and min(four) >= 1.0 else "**not met**"
    growth = [rows[(w, 16, k)]["zk_cpu_ms_per_job"] / rows[(w, 1, k)]["zk_cpu_ms_per_job"]
              for rows in map(keyed, runs) for (w, p, k) in rows if p == 16 and (w, 1, k) in rows]
    return (f"- **Against one process** (the issue's goal: 4 processes ≥ 1.0×, 16 ≥ 0.8×): 4 processes did "
            f"{span(four, '.2f')}× (at least 1.0× in {reached} of {len(four)} cells), 16 processes "
            f"{span(sixteen, '.2f')}×: {verdict}. With 16 processes the server's CPU per job is "
            f"{span(growth, '.1f')}× one process's: more sessions, each with few requests in flight, so the server "
            "receives many single requests instead of pipelined batches, and with fsync on each write batch "
            "ends with a flush.")


def requests(runs: list[Run]) -> str:
    key = "server_requests_per_cycle"
    return (f"- **Server requests per cycle**: partitioned {span(figures(runs, key, (1,), True), '.2f')} with one "
            f"process against {span(figures(runs, key, (1,), False), '.2f')} flat; partitioned "
            f"{span(figures(runs, key, (4, 16), True), '.2f')} with more processes, flat "
            f"{span(figures(runs, key, (4, 16), False), '.2f')}.")


def fleet_part(runs: list[Run], lead: Callable[[Run], str], command: Callable[[Run], list[str]]) -> list[str]:
    lines: list[str] = []
    for run in runs:
        lines += [lead(run), *command(run), *fleet_table(run), ""]
    return [*lines, "What these runs show:", "", notifications(runs), *cpu_and_throughput(runs), against_one(runs),
            requests(runs), ""]


def raw_fleet_part(run: Run) -> list[str]:
    """The table ``benchmarks.raw_fleet`` prints, and how the fleet goals read against it."""
    rows = {(row["workers"], row["processes"]): row for row in run["output"]["rows"]}

    def median(row: dict[str, Any]) -> float:
        return float(sorted(row["runs"])[len(row["runs"]) // 2])

    lines = ["| W | P | raw cycles/s (runs) | × P=1 | client CPU ms/job |", "|---|---|---|---|---|"]
    for (workers, processes), row in rows.items():
        lines.append(f"| {workers} | {processes} | {median(row):.0f} ({', '.join(f'{r:.0f}' for r in row['runs'])}) | "
                     f"{median(row) / median(rows[(workers, 1)]):.2f} | {row['cpu_ms_per_job']:.3f} |")
    share = {p: [median(row) / median(rows[(w, 1)]) for (w, q), row in rows.items() if q == p] for p in (4, 16)}
    cpu = [row["cpu_ms_per_job"] / rows[(w, 1)]["cpu_ms_per_job"] for (w, q), row in rows.items() if q == 16]
    return [*lines, "", (f"Without a board, 16 processes did {span(share[16], '.2f')}× of one process, 4 processes "
            f"{span(share[4], '.2f')}×, and the client CPU per job grew {span(cpu, '.1f')}× from 1 to 16 processes: "
            f"\"16 processes ≥ 0.8× one process\" is {'above' if max(share[16]) < 0.8 else 'within'} what the raw "
            f"cycle reaches on this machine; \"4 processes ≥ 1.0×\" is {'within' if max(share[4]) >= 1.0 else 'above'} "
            "it.")]
