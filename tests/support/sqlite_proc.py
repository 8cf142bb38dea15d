"""A child process on a sqlite:// board, for the process-death tests (tests/backends/sqlite/test_processes.py).

``python -m tests.support.sqlite_proc URL hold N``: claim N jobs, print ``ready`` and their ids, then obey
stdin lines: ``consume`` settles every claim and prints ``consumed``/``ClaimLost`` per claim, ``events``
prints the session events seen (``SESSION_EXPIRED``...), ``quit`` exits.
``python -m tests.support.sqlite_proc URL post N``: print ``ready``, then post N jobs, printing each id
as its post returns (a parent SIGKILLs it somewhere in the middle).
``python -m tests.support.sqlite_proc URL forkhold N``: claim N jobs, fork a child that sleeps without exec,
print ``ready``, the child's pid and the ids.
``python -m tests.support.sqlite_proc URL work N``: claim and consume until N jobs were consumed in
all (by any process), printing each job id consumed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from jobboard import open_board
from jobboard.board.contract import JobBoard
from jobboard.board.events import EventStream
from jobboard.errors import ClaimLost
from jobboard.job import Claim


async def hold(url: str, count: int) -> None:
    async with open_board(url) as board:
        events = board.events()
        claims: list[Claim] = []
        while len(claims) < count:
            claim = await board.claim_next("child")
            if claim is None:
                await board.wait()
                continue
            claims.append(claim)
        print("ready", " ".join(claim.job.id for claim in claims), flush=True)
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            if line == "consume":
                await consume_all(board, claims)
            elif line == "events":
                await print_session_events(events)
            elif line == "quit":
                return


async def consume_all(board: JobBoard, claims: list[Claim]) -> None:
    """Consume every claim, printing ``consumed`` or ``ClaimLost`` for each."""
    for claim in claims:
        try:
            await board.consume(claim)
            print("consumed", flush=True)
        except ClaimLost:
            print("ClaimLost", flush=True)


async def print_session_events(events: EventStream) -> None:
    """Print the session events buffered in ``events`` (``-`` if none)."""
    kinds = []
    while True:
        try:
            event = await asyncio.wait_for(anext(events), 0.2)
        except TimeoutError:
            break
        kinds.append(event.kind.name)
    print(" ".join(k for k in kinds if k == "SESSION_EXPIRED") or "-", flush=True)


async def forkhold(url: str, count: int) -> None:
    """Claim ``count`` jobs, fork a child that does not exec and sleeps (it must not keep the session's
    lock), print ``ready``, the child's pid and the ids, and sleep."""
    async with open_board(url) as board:
        claims = [claim for _ in range(count) if (claim := await board.claim_next("child")) is not None]
        pid = os.fork()
        if pid == 0:
            _sleep_and_exit()
        print("ready", pid, " ".join(claim.job.id for claim in claims), flush=True)
        await asyncio.sleep(60)


def _sleep_and_exit() -> None:
    """The forked child: a minute asleep, then gone without running the parent's cleanups."""
    time.sleep(60)
    os._exit(0)


async def post(url: str, count: int) -> None:
    async with open_board(url) as board:
        print("ready", flush=True)
        for index in range(count):
            job = await board.post("churn", {"i": index})
            print(job.id, flush=True)


async def work(url: str, count: int) -> None:
    async with open_board(url) as board:
        print("ready", flush=True)
        while await board.job_count() > 0 or count > 0:
            claim = await board.claim_next("worker")
            if claim is None:
                if await board.job_count() == 0:
                    return
                try:
                    await asyncio.wait_for(board.wait(), 0.5)
                except TimeoutError:
                    pass
                continue
            await board.consume(claim)
            print(claim.job.id, flush=True)
            count -= 1


def main() -> None:
    url, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run({"hold": hold, "post": post, "work": work, "forkhold": forkhold}[mode](url, count))


if __name__ == "__main__":
    main()
