"""Run a fault schedule against a 3-server ensemble and check the history.

``python -m tests.support.fault_run --duration 240 --seed 42`` (what ``scripts/soak`` runs):
a producer and claimer processes, each behind its own fault link, while the schedule of
:mod:`tests.support.fault_schedule` is injected; then faults off, the actors stopped, the
board drained by a clean claimer, the final state read and every invariant of
:mod:`tests.support.history` checked. Exit status 1 when a violation was found.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from jobboard import JobBoardError, open_board
from tests.support import history
from tests.support.fault_schedule import PRODUCER, Config, Fault, Report, schedule, seed_from_env
from tests.support.faultproxy import FaultLink
from tests.support.zkserver import HOST, ZooKeeperEnsemble, ensure_zookeeper_installed

ACTORS = "tests.support.fault_actors"
STOP_TIMEOUT = 15.0
READY_TIMEOUT = 60.0


async def spawn_actor(logs: Path, name: str, role: str, url: str, seed: str) -> asyncio.subprocess.Process:
    """Start an actor (its stderr to ``logs/NAME.err``) and wait for its ``ready``."""
    with open(logs / f"{name}.err", "ab") as err:  # noqa: ASYNC230 - a local file, opened once
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", ACTORS, role, url, str(logs / f"{name}.jsonl"), name, seed,
            stdout=asyncio.subprocess.PIPE, stderr=err)
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), READY_TIMEOUT)
    except TimeoutError:
        line = b""
    except BaseException:  # cancelled (another actor spawned beside it failed): not left running
        child.kill()
        raise
    if line.strip() != b"ready":
        child.kill()
        await child.wait()
        tail = (logs / f"{name}.err").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"actor {name} did not start:\n{tail}")
    return child


async def side_by_side(spawns: list[Callable[[], Coroutine[Any, Any, None]]]) -> None:
    """Run ``spawns`` at once (each waits for its actor's ``ready``: about a second of imports on a loaded
    machine); the first error cancels the others."""
    async with anyio.create_task_group() as group:
        for spawn in spawns:
            group.start_soon(spawn)


class Actor:
    """One slot (the producer, or a claimer replaced after each SIGKILL) and its fault link."""

    def __init__(self, slot: str, link: FaultLink) -> None:
        self.slot, self.link = slot, link
        self.incarnation = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.name = slot
        self.killed: set[int] = set()
        self.exits: list[tuple[str, int]] = []

    async def spawn(self, run: Run) -> None:
        self.incarnation += 1
        self.name = f"{self.slot}.{self.incarnation}"
        role = "producer" if self.slot == PRODUCER else "claimer"
        timeout = run.config.session_timeout + (1.0 if role == "producer" else 0.0)
        self.proc = await spawn_actor(run.logs, self.name, role, run.url(self.link.hosts, timeout),
                                      str(run.config.seed))

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    async def stop(self) -> None:
        """SIGCONT + SIGTERM, SIGKILL if it does not end within STOP_TIMEOUT; note an unexpected exit."""
        if self.proc is not None:
            await stop_actor(self.proc, self.name, self.killed, self.exits)


async def stop_actor(proc: asyncio.subprocess.Process, name: str, killed: set[int],
                     exits: list[tuple[str, int]]) -> None:
    """SIGCONT + SIGTERM to an actor ``proc``, SIGKILL if it does not end within STOP_TIMEOUT; an exit that is
    not 0 (or -9 for the SIGKILL here) goes to ``exits``, unless the schedule killed ``proc`` (``killed``)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        exits.append((name, -9))
        return
    if proc.pid not in killed and proc.returncode:
        exits.append((name, proc.returncode))


class Run:
    """One run of a schedule; see the module docstring."""

    def __init__(self, config: Config, ensemble: ZooKeeperEnsemble, logs: Path) -> None:
        self.config, self.ensemble, self.logs = config, ensemble, logs
        self.root = f"/fault/{config.seed}-{uuid.uuid4().hex[:8]}"
        self.injected: Counter[str] = Counter()
        self.locks: dict[str, asyncio.Lock] = {}
        self.actors: dict[str, Actor] = {}
        self.started = time.monotonic()

    def url(self, hosts: str, session_timeout: float) -> str:
        return f"zookeeper://{hosts}{self.root}?session_timeout={session_timeout}"

    async def start(self) -> None:
        """A fault link for each actor; the producer spawned first (its board makes the board's root), then
        the claimers side by side."""
        targets = [(HOST, member.port) for member in self.ensemble.members]
        for slot in self.config.targets:
            self.actors[slot] = Actor(slot, await FaultLink(targets).start())
        producer, *claimers = self.actors.values()
        await producer.spawn(self)
        await side_by_side([functools.partial(actor.spawn, self) for actor in claimers])

    async def inject(self, faults: list[Fault]) -> None:
        self.started = started = time.monotonic()
        async with anyio.create_task_group() as group:
            for fault in faults:
                await anyio.sleep(max(0.0, fault.at - (time.monotonic() - started)))
                group.start_soon(self.one, fault)
            await anyio.sleep(max(0.0, self.config.duration - (time.monotonic() - started)))

    async def one(self, fault: Fault) -> None:
        async with self.locks.setdefault(fault.target, asyncio.Lock()):
            if time.monotonic() - self.started > self.config.duration:  # its target was busy until the end
                self.injected["skipped"] += 1
                return
            self.injected[fault.kind] += 1
            print(f"fault {fault.describe()}", file=sys.stderr, flush=True)
            if fault.target == "ensemble":
                await self.kill_leader(fault.seconds)
                return
            actor = self.actors[fault.target]
            if fault.kind in LINK_KINDS:
                await self.on_link(actor.link, fault)
            else:
                await self.on_process(actor, fault)

    async def on_link(self, link: FaultLink, fault: Fault) -> None:
        if fault.kind in ("lose_reply", "lose_post_reply"):
            link.lose_reply(hold=fault.seconds, posts_only=fault.kind == "lose_post_reply")
        elif fault.kind == "lose_request":
            link.lose_request(hold=fault.seconds)
        elif fault.kind == "reset":
            link.reset()
        else:
            await link.stall(fault.seconds)

    async def on_process(self, actor: Actor, fault: Fault) -> None:
        if fault.kind == "sigkill" and actor.proc is not None:
            actor.killed.add(actor.proc.pid)
            actor.signal(signal.SIGKILL)
            await actor.proc.wait()
            await anyio.sleep(0.5)
            await actor.spawn(self)
            return
        actor.signal(signal.SIGSTOP)
        await anyio.sleep(fault.seconds)
        actor.signal(signal.SIGCONT)

    async def kill_leader(self, down_for: float) -> None:
        leader = await anyio.to_thread.run_sync(self.ensemble.leader_index, 30.0)
        await anyio.to_thread.run_sync(self.ensemble.kill, leader)
        await anyio.sleep(down_for)
        await anyio.to_thread.run_sync(self.ensemble.start_member, leader)

    async def wind_down(self) -> None:
        """Faults off: disarm and resume every link, continue every process, stop every actor."""
        for actor in self.actors.values():
            actor.link.disarm()
            actor.link.resume()
            actor.signal(signal.SIGCONT)
        await asyncio.gather(*(actor.stop() for actor in self.actors.values()))
        for actor in self.actors.values():
            await actor.link.aclose()

    async def drain(self) -> None:
        """A clean claimer, straight to the ensemble, consumes whatever is left."""
        url = self.url(self.ensemble.hosts, self.config.session_timeout)
        drainer = await spawn_actor(self.logs, "drain", "drainer", url, str(self.config.seed))
        try:
            await asyncio.wait_for(drainer.wait(), self.config.drain_timeout)
        except TimeoutError:
            drainer.kill()
            await drainer.wait()

    def harness_events(self) -> list[dict[str, Any]]:
        return [{"t": time.time(), "proc": name, "ev": "exit", "code": code}
                for actor in self.actors.values() for name, code in actor.exits]


LINK_KINDS = frozenset({"lose_reply", "lose_post_reply", "lose_request", "reset", "stall_short", "stall_long"})


def read_events(logs: Path) -> list[dict[str, Any]]:
    events = []
    for path in sorted(logs.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by SIGKILL
                events.append(json.loads(line))
    return events


async def final_state(url: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the server holds at the end, for every job the history names."""
    jobs = {e["job"] for e in events if e.get("job") and e["ev"] in ("post", "claim", "call")}
    keep = {e["job"] for e in events if e["ev"] == "claim" and e.get("keep_result")}
    async with open_board(url) as board:
        left = [{"job": job.id, "tag": job.details.get("tag")} async for job in board.iterjobs()]
        trashed = {item.job.id: item.reason async for item in board.trashed()}
        states = {job: (await board.state(job)).value for job in sorted(jobs)}
        results = {}
        for job in sorted(keep):
            if states[job] == "complete":
                with anyio.move_on_after(5):
                    results[job] = (await board.wait_for_completion(job)).result
    return {"left": left, "trashed": trashed, "states": states, "results": results}


async def run(config: Config) -> Report:
    """Run ``config``'s schedule end to end; see the module docstring."""
    faults = schedule(config)
    report = Report(config.seed, faults)
    logs = Path(config.logs or tempfile.mkdtemp(prefix=f"fault-{config.seed}-"))
    os.makedirs(logs, exist_ok=True)
    report.logs = str(logs)
    began = time.monotonic()
    ensure_zookeeper_installed()
    ensemble = await anyio.to_thread.run_sync(ZooKeeperEnsemble(3).start)
    try:
        current = Run(config, ensemble, logs)
        try:
            await current.start()
            report.timings["start"] = time.monotonic() - began
            mark = time.monotonic()
            await current.inject(faults)
            report.timings["faults"] = time.monotonic() - mark
        finally:
            mark = time.monotonic()
            await current.wind_down()
        await current.drain()
        report.timings["drain"] = time.monotonic() - mark
        with open(logs / "harness.jsonl", "a") as out:  # noqa: ASYNC230 - local, small
            out.writelines(json.dumps(event) + "\n" for event in current.harness_events())
        events = read_events(logs)
        final = await final_state(current.url(ensemble.hosts, 10.0), events)
        (logs / "final.json").write_text(json.dumps(final, default=repr, indent=1))
    finally:
        await anyio.to_thread.run_sync(ensemble.stop)
    report.injected = dict(current.injected)
    report.proxy = dict(sum((actor.link.faults.done for actor in current.actors.values()), Counter()))
    summarise(report, events, final)
    report.violations = history.check(events, final, clean=["drain"])
    report.timings["total"] = time.monotonic() - began
    return report


def summarise(report: Report, events: list[dict[str, Any]], final: dict[str, Any]) -> None:
    report.posts = dict(Counter(e["outcome"] for e in events if e["ev"] == "post"))
    report.jobs = len(final["states"])
    outcomes = {(e["proc"], e["id"]): e["outcome"] for e in events if e["ev"] == "done"}
    report.errors = dict(Counter(_generic(e["error"])
                                 for e in events if e["ev"] == "done" and e.get("error")))
    report.settles = dict(Counter(f"{e['kind']} {outcomes.get((e['proc'], e['id']), 'unknown')}"
                                  for e in events if e["ev"] == "call"))


def _generic(message: str) -> str:
    """An error message without its job ids and host lists (so that they can be counted)."""
    return re.sub(r"\(127\.0\.0\.1:[^)]*\)", "(<hosts>)", re.sub(r"\d-\d{13}", "<id>", message))[:100]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fault_run", description=__doc__)
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of faults (default 240)")
    parser.add_argument("--seed", type=int, default=None, help="default: $FAULT_SEED, else random")
    parser.add_argument("--claimers", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--mean-gap", type=float, default=1.2, help="mean seconds between faults")
    parser.add_argument("--logs", default=None, help="directory for the JSON-lines logs")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule and exit")
    parser.add_argument("--check", metavar="LOGS", help="only check the logs (and final.json) of a past run")
    args = parser.parse_args(argv)
    if args.check:
        logs = Path(args.check)
        found = history.check(read_events(logs), json.loads((logs / "final.json").read_text()), clean=["drain"])
        print("\n".join(f"{v.kind} {v.job}: {v.detail}" for v in found), f"\n{history.summary(found)}")
        return 1 if found else 0
    seed = seed_from_env() if args.seed is None else args.seed
    config = Config(seed=seed, duration=args.duration, claimers=args.claimers,
                    session_timeout=args.session_timeout, mean_gap=args.mean_gap, logs=args.logs)
    print(f"fault schedule seed {seed} (replay: --seed {seed})", flush=True)
    if args.schedule_only:
        print("\n".join(fault.describe() for fault in schedule(config)))
        return 0
    try:
        report = anyio.run(run, config)
    except (JobBoardError, RuntimeError, TimeoutError) as error:
        print(f"fault run failed: {error}", file=sys.stderr)
        return 2
    print(report.text(details=50), flush=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
