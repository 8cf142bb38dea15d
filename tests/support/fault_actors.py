"""The processes of a fault-schedule run: a producer and claimers, using the public API only.

``python -m tests.support.fault_actors ROLE URL LOG NAME SEED`` with ROLE ``producer``,
``claimer`` or ``drainer``. Each prints ``ready`` once its board is open, appends what it
believed happened to LOG (one JSON line per event, see :mod:`tests.support.history`), and
stops gracefully on SIGTERM (after the settle or group in hand). A drainer consumes every
job and exits once the board is empty (or nothing became claimable for a while).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from typing import Any

import anyio
import anyio.abc

from jobboard import (
    AlreadyClaimed,
    BackendUnavailable,
    Claim,
    ClaimLost,
    Job,
    JobBoard,
    JobBoardError,
    JobNotFound,
    open_board,
)

WORK, GATE = "work", "gate"
SETTLE_TRIES = 4
"""A settle that raised BackendUnavailable is retried (the same call) this many times in all."""
DRAIN_IDLE = 8.0
"""A drainer gives up after this long without a claimable job (longer than any delay or session)."""


class Log:
    """Append-only JSON lines, one write per event (O_APPEND: never interleaved)."""

    def __init__(self, path: str, proc: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.proc = proc
        self.calls = 0

    def event(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"t": time.time(), "proc": self.proc, "ev": ev, **fields}, default=repr)
        os.write(self.fd, line.encode() + b"\n")

    def escape(self, where: str, error: BaseException, job: str | None = None) -> None:
        self.event("escape", where=where, error=repr(error), job=job)

    def claim(self, claim: Claim) -> None:
        job = claim.job
        self.event("claim", job=job.id, tag=job.details.get("tag"), gen=claim.generation, attempt=job.attempts,
                   owner=claim.owner, deps=list(job.depends_on), dep_results=list(claim.dependency_results),
                   keep_result=job.keep_result, max_attempts=job.max_attempts)


async def settle(board: JobBoard, log: Log, claim: Claim, kind: str, **args: Any) -> str:
    """Run one settle (retrying the same call on BackendUnavailable); log every call; its outcome."""
    outcome = "BackendUnavailable"
    for _ in range(SETTLE_TRIES):
        message = ""
        log.calls += 1
        log.event("call", id=log.calls, kind=kind, job=claim.job.id, tag=claim.job.details.get("tag"),
                  gen=claim.generation, owner=claim.owner, **args)
        try:
            if kind == "consume":
                await board.consume(claim, args["result"])
            elif kind == "abandon":
                await board.abandon(claim, retry_after=args["retry_after"])
            else:
                await board.trash(claim, args["reason"])
            outcome = "ok"
        except JobBoardError as error:
            outcome, message = type(error).__name__, str(error)
        except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
            outcome, message = type(error).__name__, repr(error)
            log.escape(kind, error, claim.job.id)
        log.event("done", id=log.calls, outcome=outcome, error=message)
        if outcome != "BackendUnavailable":
            return outcome
        await anyio.sleep(0.3)
    return outcome


def result_of(claim: Claim, rng: random.Random) -> dict[str, Any]:
    return {"by": claim.owner, "gen": claim.generation, "n": rng.randrange(1 << 30)}


async def work_on(board: JobBoard, log: Log, claim: Claim, rng: random.Random) -> None:
    """Work a little, then consume (mostly), abandon (with or without a delay) or trash."""
    slow = rng.random() < 0.25  # holding a claim longer: more chances to be frozen or cut off with it
    await anyio.sleep(rng.uniform(0.5, 1.5) if slow else rng.uniform(0.02, 0.3))
    pick = rng.random()
    if pick < 0.8:
        await settle(board, log, claim, "consume", result=result_of(claim, rng))
    elif pick < 0.95:
        delay = rng.choice([None, round(rng.uniform(0.5, 2.5), 2)])
        await settle(board, log, claim, "abandon", retry_after=delay)
    else:
        await settle(board, log, claim, "trash", reason=f"{claim.owner} gave up on {claim.job.details.get('tag')}")


async def claimer(board: JobBoard, log: Log, rng: random.Random, stop: anyio.Event, *, drain: bool) -> None:
    idle_since = time.monotonic()
    names = None if drain else [WORK]
    while not stop.is_set():
        try:
            claim = await board.claim_next(log.proc, names=names)
        except JobBoardError as error:
            log.event("claim-error", error=type(error).__name__)
            await anyio.sleep(0.2)
            continue
        except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
            log.escape("claim_next", error)
            await anyio.sleep(0.2)
            continue
        if claim is None:
            if drain and (await _empty(board, log) or time.monotonic() - idle_since > DRAIN_IDLE):
                return
            with anyio.move_on_after(0.5):
                await _quietly(board.wait(names=names), log, "wait")
            continue
        idle_since = time.monotonic()
        log.claim(claim)
        if drain:
            await settle(board, log, claim, "consume", result=result_of(claim, rng))
        else:
            await work_on(board, log, claim, rng)


async def _empty(board: JobBoard, log: Log) -> bool:
    count = await _quietly(board.job_count(), log, "job_count")
    return count == 0


async def _quietly(awaitable: Any, log: Log, where: str) -> Any:
    """Await a read; a contract error is None, anything else is logged as an escape."""
    try:
        return await awaitable
    except JobBoardError:
        await anyio.sleep(0.2)
    except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
        log.escape(where, error)
        await anyio.sleep(0.2)
    return None


async def post(board: JobBoard, log: Log, tag: str, name: str, deps: list[Job], **options: Any) -> Job | None:
    """Post once; log what it returned or raised."""
    fields = {"tag": tag, "name": name, "deps": [d.details.get("tag") for d in deps], **options}
    try:
        job = await board.post(name, {"tag": tag}, depends_on=deps, **options)
    except JobBoardError as error:
        log.event("post", outcome=type(error).__name__, job=None, error=str(error), **fields)
        return None
    except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
        log.escape("post", error)
        log.event("post", outcome=type(error).__name__, job=None, **fields)
        return None
    log.event("post", outcome="ok", job=job.id, **fields)
    return job


SHAPES = {"single": [[]], "chain": [[], [0], [1]], "diamond": [[], [0], [0], [1, 2]]}
"""Each shape: the dependencies (indexes of earlier nodes) of each node."""


async def producer(board: JobBoard, log: Log, rng: random.Random, stop: anyio.Event) -> None:
    group = 0
    while not stop.is_set():
        group += 1
        shape = rng.choices(list(SHAPES), weights=[2, 1, 1])[0]
        await post_group(board, log, rng, f"{log.proc}-g{group}", shape)
        await anyio.sleep(rng.uniform(0.2, 0.6))  # about what the claimers keep up with


async def post_group(board: JobBoard, log: Log, rng: random.Random, prefix: str, shape: str) -> None:
    """A single job, or a chain or diamond behind a gate (released once all of it is posted)."""
    gate = None if shape == "single" else await post(board, log, f"{prefix}-gate", GATE, [])
    if shape != "single" and gate is None:
        return
    nodes: list[Job] = []
    for index, deps in enumerate(SHAPES[shape]):
        parents = [nodes[i] for i in deps] if deps else ([gate] if gate else [])
        options = {"keep_result": rng.random() < 0.3, "max_attempts": rng.choice([None, None, 2, 3])}
        if shape == "single":  # urgent ones overtake a backlog: claimed as soon as posted
            options["priority"] = rng.choice(["normal", "high"])
        job = await post(board, log, f"{prefix}-{shape}-{index}", WORK, parents, **options)
        if job is None:
            break
        nodes.append(job)
    if gate is not None:
        await release(board, log, rng, gate)


async def release(board: JobBoard, log: Log, rng: random.Random, gate: Job) -> None:
    """Claim and consume a gate (again after ClaimLost, a few times)."""
    for _ in range(6):
        try:
            claim = await board.claim(gate, log.proc)
        except BackendUnavailable:
            await anyio.sleep(0.3)
            continue
        except (AlreadyClaimed, JobNotFound):
            return  # an earlier claim of ours whose reply was lost: the drain takes over
        except JobBoardError:
            await anyio.sleep(0.3)
            continue
        except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
            log.escape("claim", error, gate.id)
            return
        log.claim(claim)
        if await settle(board, log, claim, "consume", result=result_of(claim, rng)) != ClaimLost.__name__:
            return


async def main(role: str, url: str, path: str, name: str, seed: int) -> None:
    log = Log(path, name)
    rng = random.Random(f"{seed}-{name}")
    stop = anyio.Event()
    board = await opened(url)
    try:
        async with anyio.create_task_group() as group:
            await group.start(_stop_on_sigterm, stop)
            print("ready", flush=True)
            if role == "producer":
                await producer(board, log, rng, stop)
            else:
                await claimer(board, log, rng, stop, drain=role == "drainer")
            group.cancel_scope.cancel()
    finally:
        await close(board, log)


async def close(board: JobBoard, log: Log) -> None:
    try:
        await board.aclose()
    except JobBoardError as error:
        log.event("close-error", error=str(error))
    except Exception as error:  # noqa: BLE001 - recorded: no other exception may escape
        log.escape("aclose", error)


async def opened(url: str) -> JobBoard:
    """An open board (the first connection may meet a fault: it is tried again)."""
    for _ in range(10):
        board = open_board(url)
        try:
            await board.open()
            return board
        except BackendUnavailable:
            await board.aclose()
            await anyio.sleep(0.5)
    raise SystemExit(f"no ZooKeeper through {url}")


async def _stop_on_sigterm(stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            stop.set()
            return


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
