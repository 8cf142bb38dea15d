"""The fault schedule's process faults on a sqlite:// board, checked against what every process believed.

The seeded schedule of :mod:`tests.support.fault_schedule` with only what a file board can meet: a
claimer process SIGKILLed (a new one replaces it), SIGSTOPped shorter or longer than its session
timeout (the schedule's link faults and leader kills have no counterpart on one host and are left
out). The producer and claimers are the same actor processes as the ZooKeeper runs
(:mod:`tests.support.fault_actors`), the history is checked by the same :mod:`tests.support.history`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio

from tests.support import history
from tests.support.fault_run import final_state, read_events, side_by_side, spawn_actor, stop_actor, summarise
from tests.support.fault_schedule import PRODUCER, Config, Fault, Report, schedule

PROCESS_KINDS = frozenset({"sigkill", "sigstop_short", "sigstop_long"})


class Slot:
    """A producer or claimer slot: its current process (a SIGKILLed claimer is replaced)."""

    def __init__(self, name: str, url: str, logs: Path, seed: int) -> None:
        self.slot, self.url, self.logs, self.seed = name, url, logs, seed
        self.incarnation = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.killed: set[int] = set()
        self.exits: list[tuple[str, int]] = []

    async def spawn(self) -> None:
        self.incarnation += 1
        role = "producer" if self.slot == PRODUCER else "claimer"
        self.proc = await spawn_actor(self.logs, f"{self.slot}.{self.incarnation}", role, self.url, str(self.seed))

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    async def fault(self, fault: Fault) -> None:
        if fault.kind == "sigkill" and self.proc is not None:
            self.killed.add(self.proc.pid)
            self.signal(signal.SIGKILL)
            await self.proc.wait()
            await anyio.sleep(0.5)
            await self.spawn()
            return
        self.signal(signal.SIGSTOP)
        await anyio.sleep(fault.seconds)
        self.signal(signal.SIGCONT)

    async def stop(self) -> None:
        if self.proc is not None:
            await stop_actor(self.proc, f"{self.slot}.{self.incarnation}", self.killed, self.exits)


async def inject(slots: dict[str, Slot], faults: list[Fault], duration: float, injected: Counter[str]) -> None:
    started = time.monotonic()
    locks: dict[str, asyncio.Lock] = {}

    async def one(fault: Fault) -> None:
        async with locks.setdefault(fault.target, asyncio.Lock()):
            if time.monotonic() - started > duration:
                injected["skipped"] += 1
                return
            injected[fault.kind] += 1
            await slots[fault.target].fault(fault)

    async with anyio.create_task_group() as group:
        for fault in faults:
            await anyio.sleep(max(0.0, fault.at - (time.monotonic() - started)))
            group.start_soon(one, fault)
        await anyio.sleep(max(0.0, duration - (time.monotonic() - started)))


async def run(config: Config) -> Report:
    """Run ``config``'s process faults on a fresh file; the report's ``violations`` are the history's."""
    faults = [fault for fault in schedule(config) if fault.kind in PROCESS_KINDS]
    report = Report(config.seed, faults)
    logs = Path(config.logs or tempfile.mkdtemp(prefix=f"sqlite-fault-{config.seed}-"))
    os.makedirs(logs, exist_ok=True)
    report.logs = str(logs)
    url = f"sqlite://{logs}/board.db?board=fault&session_timeout={config.session_timeout}"
    slots = {name: Slot(name, url, logs, config.seed) for name in config.targets}
    injected: Counter[str] = Counter()
    began = time.monotonic()
    try:
        producer, *claimers = slots.values()
        await producer.spawn()  # it makes the board; then the claimers side by side
        await side_by_side([claimer.spawn for claimer in claimers])
        await inject(slots, faults, config.duration, injected)
    finally:
        await asyncio.gather(*(slot.stop() for slot in slots.values()))
    drainer = await spawn_actor(logs, "drain", "drainer", url, str(config.seed))
    try:
        await asyncio.wait_for(drainer.wait(), config.drain_timeout)
    except TimeoutError:
        drainer.kill()
        await drainer.wait()
    with open(logs / "harness.jsonl", "a") as out:  # noqa: ASYNC230 - local, small
        out.writelines(json.dumps({"t": time.time(), "proc": name, "ev": "exit", "code": code}) + "\n"
                       for slot in slots.values() for name, code in slot.exits)
    events = read_events(logs)
    final = await final_state(url, events)
    report.injected = dict(injected)
    summarise(report, events, final)
    report.violations = history.check(events, final, clean=["drain"])
    report.timings["total"] = time.monotonic() - began
    return report
