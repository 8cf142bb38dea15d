"""redis-server's instructions per ``claim_next`` and per ``consume``, by variant (flow control's cost on redis://).

    python -m benchmarks.redis_flow_cost [--jobs 500] [--variants plain,group,limit,limit+rate]

Starts ``redis-server --hz 1`` under ``valgrind --tool=callgrind`` with instrumentation off, posts ``--jobs`` jobs
on a fresh board, then counts only the claims (``callgrind_control -i on``, one claimer, ``claim_next`` one by one)
and then only their consumes: a count the machine's load does not move (throughput ratios on a shared 2-core
machine move by more than the difference). Variants: ``plain`` jobs without a group on a board without limits;
``group`` jobs of one group, no limit; ``limit`` the same with ``concurrency=1000`` and another name paused (the
claims consult flow control, nothing binds); ``limit+rate`` plus a rate of 10 000 per 0.05 s. Measures the
library on ``PYTHONPATH``: run it with a base tree's paths first for a before/after. One JSON line per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from jobboard import Claim, NewJob, open_board
from jobboard.board.contract import JobBoard


def instructions(dump: Path) -> int:
    """The total of a callgrind dump (its ``summary:`` or ``totals:`` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no total in {dump}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def prepare(board: JobBoard, variant: str, jobs: int) -> None:
    if variant.startswith("limit"):
        await board.set_limit("tenant", concurrency=1000, rate=(10_000, 0.05) if variant == "limit+rate" else None)
        await board.pause("some-other-name")
    group = None if variant == "plain" else "tenant"
    await board.post_many([NewJob("work", group=group) for _ in range(jobs)])


async def measure(port: int, variant: str, jobs: int, control: Callable[..., None]) -> None:
    """Post, warm up, then claim and consume with the server's counting on around each phase (``control``)."""
    async with open_board(f"redis://127.0.0.1:{port}/0/cost-{uuid.uuid4().hex}?session_timeout=600") as board:
        await prepare(board, variant, jobs + 5)
        for _ in range(5):  # warm up: the library loaded, the connections made
            first = await board.claim_next("w")
            assert first is not None
            await board.consume(first)
        claims: list[Claim] = []
        control("-i", "on")
        for _ in range(jobs):
            claim = await board.claim_next("w")
            assert claim is not None
            claims.append(claim)
        control("-d", "claims")
        for claim in claims:
            await board.consume(claim)
        control("-d", "consumes")
        control("-i", "off")


def counted(variant: str, jobs: int) -> dict[str, object]:
    """One variant on its own server: instructions per claim and per consume."""
    port, dumps = free_port(), Path(tempfile.mkdtemp())
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                               f"--callgrind-out-file={dumps}/cg.%p", "redis-server", "--port", str(port),
                               "--save", "", "--appendonly", "no", "--hz", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(server.pid)], capture_output=True, check=True)

    try:
        for _ in range(300):
            time.sleep(0.2)
            ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, check=False)
            if ping.stdout.strip() == b"PONG":
                break
        asyncio.run(measure(port, variant, jobs, control))
    finally:
        server.terminate()
        server.wait()
    claims_dump, consumes_dump = sorted(dumps.glob("cg.*.*"), key=lambda path: int(path.suffix[1:]))[:2]
    return {"variant": variant, "jobs": jobs, "claim_next_instructions": round(instructions(claims_dump) / jobs),
            "consume_instructions": round(instructions(consumes_dump) / jobs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--variants", default="plain,group,limit,limit+rate")
    args = parser.parse_args()
    for variant in args.variants.split(","):
        print(json.dumps(counted(variant, args.jobs)))


if __name__ == "__main__":
    main()
