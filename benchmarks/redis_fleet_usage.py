"""Where a fleet's CPU goes (``benchmarks.redis_fleet``): each claiming process's rusage, the server's counters,
and the table of them."""

from __future__ import annotations

import resource
import socket
import subprocess
import time
from typing import Any

SERVER_EVENTS = ("total_reads_processed", "total_writes_processed")
"""``INFO stats``: socket reads and writes the server made (a pipelined batch is one read)."""


def usage() -> dict[str, float]:
    """This process's CPU (user, system) and context switches (voluntary: it slept; involuntary: preempted)."""
    found = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": found.ru_utime, "sys_s": found.ru_stime, "sleeps": found.ru_nvcsw, "preempted": found.ru_nivcsw}


def client_usage(parts: list[dict[str, Any]], cycles: int) -> dict[str, float]:
    """The fleet's system-CPU share, sleeps and preemptions per job, and the share of its CPU spent after
    each process's last cycle (polling an empty board while others drain)."""
    cpu = max(1e-9, sum(part["cpu_s"] for part in parts))
    return {"client_sys_share": round(sum(part["sys_s"] for part in parts) / cpu, 3),
            "client_sleeps_per_job": round(sum(part["sleeps"] for part in parts) / cycles, 3),
            "client_preempted_per_job": round(sum(part["preempted"] for part in parts) / cycles, 3),
            "tail_cpu_share": round(sum(part["tail_cpu_s"] for part in parts) / cpu, 4)}


USAGE = ("client_instructions_per_job", "client_sys_share", "client_sleeps_per_job", "client_preempted_per_job",
         "tail_cpu_share", "server_reads_per_cycle")


def figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def usage_table(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Where the CPU goes, one row per (tree, P), for runs that measured it (none: no lines)."""
    if not any("client_sys_share" in found for found in summary.values()):
        return []
    lines = [("| tree | P | client instructions / job (callgrind) | client system-CPU share | client sleeps / job | "
              "client preemptions / job | client CPU after a process's last cycle (share) | server socket reads / cycle |"),
             "|---|---|---|---|---|---|---|---|"]
    for key, found in summary.items():
        tree, processes = key.rsplit(" P=", 1)
        cells = [f"{figure(found[name]['median'])} ({figure(found[name]['min'])}–{figure(found[name]['max'])})"
                 if name in found else "—" for name in USAGE]
        lines.append(f"| {tree} | {processes} | " + " | ".join(cells) + " |")
    return lines


def server_info(url: str, section: str) -> dict[str, str]:
    """``INFO section`` of the server of ``url`` (``redis://host:port/...``), over a plain socket."""
    host, port = url.removeprefix("redis://").split("/", 1)[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"INFO {section}\r\n".encode())
        data = b""
        while b"\r\n" not in data:
            data += conn.recv(65536)
        header, _, body = data.partition(b"\r\n")
        length = int(header[1:])
        while len(body) < length:
            body += conn.recv(65536)
    lines = body[:length].decode().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def server_counts(url: str) -> dict[str, float]:
    """Calls per command (``INFO commandstats``) and the server's CPU seconds (``INFO cpu``)."""
    counts: dict[str, float] = {}
    for key, value in server_info(url, "commandstats").items():
        fields = dict(part.split("=", 1) for part in value.split(","))
        counts[key.removeprefix("cmdstat_")] = float(fields["calls"])
    cpu = server_info(url, "cpu")
    counts["cpu_s"] = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    stats = server_info(url, "stats")
    for name in SERVER_EVENTS:
        counts[name] = float(stats.get(name, 0))
    return counts


def start_together(children: list[subprocess.Popen[str]], url: str) -> tuple[dict[str, float], float]:
    """Wait for every child's ``ready`` line, read the server's counts and the time, then tell them all ``go``:
    the counts before the phase and its start."""
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    before, started = server_counts(url), time.time()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    return before, started
