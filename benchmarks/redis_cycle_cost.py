"""Where a full cycle's time goes: client and server CPU per post -> claim -> consume cycle.

    python -m benchmarks.redis_cycle_cost --url redis://127.0.0.1:6379 [--systems wire,jobboard]
        [--workers 16] [--seconds 3] [--rounds 3]

For the raw Lua ceiling (``wire``) and the board (``jobboard``) of ``benchmarks.redis_clients``, in
interleaved rounds on one server: cycles/s, the client process's CPU per cycle (user + system, so
its share of the loopback's kernel work too), the server's CPU per cycle (``INFO cpu``: everything
redis-server did, its reads and writes included), and within it the scripts' time (``INFO
commandstats``: FCALL / EVALSHA) and the event reads' (XREAD). Use a server no one else uses.
Medians over rounds; prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from benchmarks.redis_clients import SYSTEMS
from benchmarks.redis_compare import median


async def server_figures(url: str) -> dict[str, float]:
    """The server's CPU seconds and per-command microseconds so far."""
    from jobboard_redis.client_wire import connect
    from jobboard_redis.options import parse_redis_url

    options = parse_redis_url(url + "/0/x")
    wire, _ = await connect(options.host, options.port, reply_timeout=10, connect_timeout=5, tls=None)
    try:
        cpu, stats = (await wire.send(("INFO", "cpu"))).decode(), (await wire.send(("INFO", "commandstats"))).decode()
    finally:
        wire.close()
    found = {}
    for line in cpu.splitlines():
        if line.startswith(("used_cpu_sys:", "used_cpu_user:")):
            found[line.split(":")[0]] = float(line.split(":")[1])
    figures = {"server_cpu_s": found["used_cpu_sys"] + found["used_cpu_user"]}
    for line in stats.splitlines():
        name, _, fields = line.partition(":")
        if name in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_xread"):
            values = dict(field.split("=") for field in fields.split(","))
            figures[name[8:] + "_us"] = float(values["usec"])
    return figures


async def one(url: str, system: str, workers: int, seconds: float) -> dict[str, float]:
    before, cpu, started = await server_figures(url), time.process_time(), time.perf_counter()
    rate = await SYSTEMS[system](url, workers, seconds)
    client_cpu, elapsed = time.process_time() - cpu, time.perf_counter() - started
    after = await server_figures(url)
    cycles = max(rate * seconds, 1.0)
    scripts = sum(after.get(key, 0.0) - before.get(key, 0.0) for key in ("fcall_us", "evalsha_us"))
    return {"cycles_per_s": round(rate), "client_cpu_us": round(client_cpu / cycles * 1e6, 1),
            "server_cpu_us": round((after["server_cpu_s"] - before["server_cpu_s"]) / cycles * 1e6, 1),
            "scripts_us": round(scripts / cycles, 1),
            "xread_us": round((after.get("xread_us", 0.0) - before.get("xread_us", 0.0)) / cycles, 1),
            "busy_share": round((client_cpu + after["server_cpu_s"] - before["server_cpu_s"]) / elapsed, 2)}



async def measure(url: str, systems: list[str], workers: int, seconds: float, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {system: [] for system in systems}
    for _ in range(rounds):
        for system in systems:
            runs[system].append(await one(url, system, workers, seconds))
    return {"workers": workers, "seconds": seconds, "rounds": rounds, "runs": runs,
            "median": {system: {key: median([run[key] for run in found]) for key in found[0]}
                       for system, found in runs.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--systems", default="wire,jobboard")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    report = asyncio.run(measure(args.url, args.systems.split(","), args.workers, args.seconds, args.rounds))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
