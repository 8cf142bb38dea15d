"""What one call costs a process with one claimer on redis://, layer by layer, against asyncio's floor (issue 28).

    python -m benchmarks.lone_claimer [--calls 4000] [--rounds 3] [--base REV] [--callgrind]

One redis-server (AOF off), one process per part and run, one caller making one call at a time:

- ``ping``: a bare ``asyncio.Protocol`` sending ``PING`` and waiting for ``+PONG`` (the loop's floor);
  ``ping_buffered``: the same as an ``asyncio.BufferedProtocol`` reading into one reused buffer;
- ``redispy_fcall`` / ``redispy_evalsha``: ``redis.asyncio`` (with hiredis) calling a one-line function;
- ``wire``: the board's connection (``client_wire.Wire``) sending the board's ``beat`` ``FCALL``;
- ``client``: the same call through ``RedisClient.call`` (nonces, retries, errors mapped);
- ``board``: ``open_board``, then ``claim_next`` → ``consume`` until the board is empty (per call: per job / 2);
  ``board_fused``: ``consume_and_claim_next`` (one call per job, as a worker's slot makes it).

Per part: the client's CPU µs per call (rusage), wall µs per call, and the server's CPU µs per call
(``INFO cpu``); with ``--callgrind``, the client's instructions per call instead (valgrind, counting only
the calls: :mod:`benchmarks.callgrind`), which the machine's load cannot move. With ``--base``, the
parts that use the library (``wire``, ``client``, ``board``) also run from that commit, interleaved.
Prints a JSON line and a Markdown table (medians, min–max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.callgrind import ENABLED, counting, instructions_in

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("ping", "ping_buffered", "redispy_fcall", "redispy_evalsha")
LIBRARY_PARTS = ("wire", "client", "board", "board_fused")
NOOP = "#!lua name=jbfloor\nredis.register_function('jbfloor_noop', function(keys, args) return 1 end)"


# -- the parts, each in its own process -------------------------------------------------------


class Ping(asyncio.Protocol):
    """PING → +PONG, one at a time: what asyncio alone pays for a round trip."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reply: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(data)

    async def ping(self) -> bytes:
        assert self.transport is not None
        self.reply = asyncio.get_running_loop().create_future()
        self.transport.write(b"*1\r\n$4\r\nPING\r\n")
        return await self.reply


class BufferedPing(Ping, asyncio.BufferedProtocol):
    """:class:`Ping` reading into one reused buffer (no new ``bytes`` per read)."""

    buffer = memoryview(bytearray(65536))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self.buffer[:nbytes]))


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("redis://").split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


async def measured(part: str, url: str, calls: int, one: Callable[[], Awaitable[Any]],
                   per_call: int = 1) -> dict[str, float]:
    """Run ``one()`` until ``calls`` calls are made (``per_call`` calls each): the client's CPU, the wall
    time and the server's CPU, in µs per call."""
    from benchmarks.common import process_cpu_seconds

    for _ in range(50):  # warm up: the first calls pay for imports and caches
        await one()
    server, started, cpu = server_cpu_s(url), time.perf_counter(), process_cpu_seconds()
    with counting(part):
        for _ in range(calls // per_call):
            await one()
    cpu, wall = process_cpu_seconds() - cpu, time.perf_counter() - started
    return {"cpu_us": 1e6 * cpu / calls, "wall_us": 1e6 * wall / calls, "server_us": 1e6 * (server_cpu_s(url) - server) / calls}


async def run_part(part: str, url: str, calls: int) -> dict[str, float]:
    """One part (see the module docstring) against ``url``'s server."""
    host, port = host_port(url)
    if part.startswith("ping"):
        kind = BufferedPing if part == "ping_buffered" else Ping
        _, protocol = await asyncio.get_running_loop().create_connection(kind, host, port)
        return await measured(part, url, calls, protocol.ping)
    if part.startswith("redispy"):
        import redis.asyncio as redispy

        server = redispy.Redis(host=host, port=port)
        await server.function_load(NOOP, replace=True)
        sha = await server.script_load("return 1")
        call = (lambda: server.fcall("jbfloor_noop", 0)) if part == "redispy_fcall" else (lambda: server.evalsha(sha, 0))
        try:
            return await measured(part, url, calls, call)
        finally:
            await server.aclose()
    if part.startswith("board"):
        return await board_part(url, calls, fused=part == "board_fused")
    from jobboard_redis.client import FUNCTION, RedisClient
    from jobboard_redis.options import parse_redis_url

    client = RedisClient(parse_redis_url(url))
    await client.check_server()
    session = uuid.uuid4().hex
    await client.call("open", "", session, 30_000)
    try:
        if part == "client":
            return await measured(part, url, calls, lambda: client.call("beat", "", session, 30_000))
        wire = await client._wire()
        command = ("FCALL", FUNCTION, 1, client.prefix, "beat", "", session, 30_000)
        return await measured(part, url, calls, lambda: wire.send(command))
    finally:
        await client.close()


async def board_part(url: str, calls: int, *, fused: bool) -> dict[str, float]:
    """One claimer: ``claim_next`` → ``consume`` over ``calls / 2`` jobs posted first (two calls per job), or
    (``fused``) ``consume_and_claim_next`` over ``calls`` jobs."""
    from benchmarks.cycle import post_jobs
    from jobboard import Claim, open_board

    async with open_board(url) as board:
        await post_jobs(board, (calls if fused else calls // 2) + 60)
        held: list[Claim | None] = [await board.claim_next("lone") if fused else None]

        async def cycle() -> None:
            claim = await board.claim_next("lone")
            assert claim is not None
            await board.consume(claim)

        async def fused_cycle() -> None:
            assert held[0] is not None
            held[0] = await board.consume_and_claim_next(held[0])

        if fused:
            return await measured("board_fused", url, calls, fused_cycle)
        return await measured("board", url, calls, cycle, per_call=2)


# -- the runs ---------------------------------------------------------------------------------


def server_cpu_s(url: str) -> float:
    from benchmarks.redis_fleet import server_info

    cpu = server_info(url, "cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def run_together(part: str, url: str, calls: int, processes: int) -> dict[str, float]:
    """``processes`` copies of one part at once, each its own process and server connection (as a fleet of
    one-caller processes): the medians of their figures per call."""
    from benchmarks.cycle import run_url

    command = [sys.executable, "-m", "benchmarks.lone_claimer", "--part", part, "--url", run_url(url),
               "--calls", str(calls)]
    children = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    found = [json.loads(child.communicate(timeout=1800)[0].strip().splitlines()[-1]) for child in children]
    return {name: statistics.median(one[name] for one in found) for name in found[0]}


def run_in(tree: Path, part: str, url: str, calls: int, callgrind: bool) -> dict[str, float]:
    """One part in a process of its own, from ``tree``'s library: its figures per call."""
    from benchmarks.cycle import run_url
    from benchmarks.redis_fleet import tree_env

    board = run_url(url)
    command = [sys.executable, "-m", "benchmarks.lone_claimer", "--part", part, "--url", board, "--calls", str(calls)]
    env = tree_env(tree)
    with tempfile.TemporaryDirectory() as dumps:
        if callgrind:
            env[ENABLED] = "1"
            command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={dumps}/cg.%p",
                       *command]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=1800)
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        if callgrind:
            counted = dict(instructions_in(dump) for dump in Path(dumps).glob("cg.*.*"))
            result["instructions"] = counted[part] / calls
    return result


def table(summary: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """One row per (tree, part): medians (min–max) of the rounds."""
    figures = ("instructions", "cpu_us", "wall_us", "server_us")
    lines = ["| part | instructions / call | client CPU µs / call | wall µs / call | server CPU µs / call |",
             "|---|---|---|---|---|"]
    for key, found in summary.items():
        cells = [f"{found[name]['median']:,.0f} ({found[name]['min']:,.0f}–{found[name]['max']:,.0f})"
                 if name in found else "—" for name in figures]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default=",".join(FLOORS + LIBRARY_PARTS))
    parser.add_argument("--base", default=None, help="a commit to measure too, interleaved (a git worktree)")
    parser.add_argument("--callgrind", action="store_true", help="count the client's instructions (valgrind)")
    parser.add_argument("--together", type=int, default=1,
                        help="run each part as this many processes at once (medians of theirs): a fleet's floor")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.part:
        print(json.dumps(asyncio.run(run_part(options.part, options.url, options.calls))))
        return 0
    from benchmarks.before_after import base_tree
    from tests.support.redisserver import RedisServer, ensure_redis_installed

    parts = options.parts.split(",")
    ensure_redis_installed()
    with ExitStack() as stack:
        url = stack.enter_context(RedisServer(appendonly=False)).url("/0/lone")
        trees = [("this", ROOT)] + ([(f"base {options.base}", stack.enter_context(base_tree(options.base)))]
                                    if options.base else [])
        runs: dict[str, list[dict[str, float]]] = {}
        for round_number in range(options.rounds):
            for part in parts:
                order = trees if round_number % 2 == 0 else trees[::-1]
                for name, tree in order if part in LIBRARY_PARTS else trees[:1]:
                    key = f"{part} ({name})" if part in LIBRARY_PARTS and options.base else part
                    runs.setdefault(key, []).append(
                        run_together(part, url, options.calls, options.together) if options.together > 1
                        else run_in(tree, part, url, options.calls, options.callgrind))
                    print(f"round {round_number + 1}: {key}: {runs[key][-1]}", file=sys.stderr, flush=True)
    summary = {key: {name: {"median": statistics.median(run[name] for run in found),
                            "min": min(run[name] for run in found), "max": max(run[name] for run in found)}
                     for name in found[0]} for key, found in runs.items()}
    lines = table(summary)
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps({"bench": "lone_claimer", "calls": options.calls, "rounds": options.rounds, "base": options.base,
                      "together": options.together,
                      "callgrind": options.callgrind, "runs": runs, "summary": summary, "table": lines}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
