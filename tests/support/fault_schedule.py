"""Seeded fault schedules for zookeeper:// (pure: the same seed gives the same schedule).

Faults on a client's link (:class:`~tests.support.faultproxy.FaultLink`): a lost reply
after the server applied a write, a lost request, a reset, a stall shorter or longer
than the session timeout. On a claimer process: SIGKILL (a new claimer replaces it),
SIGSTOP shorter or longer than the session timeout. On the ensemble: the leader
killed and restarted.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

LINK_FAULTS = {"lose_post_reply": 1.5, "lose_reply": 3.0, "lose_request": 1.5, "reset": 1.5, "stall_short": 1.0, "stall_long": 1.5}
PROCESS_FAULTS = {"sigkill": 1.0, "sigstop_short": 1.0, "sigstop_long": 2.0}
LEADER_EVERY = 45.0
"""Seconds of schedule per leader kill (at least one per run)."""
PRODUCER = "producer"


@dataclass(frozen=True)
class Config:
    """One run: its seed, length, actors and timeouts."""

    seed: int
    duration: float = 25.0
    """Seconds of faults (the producer and claimers run meanwhile)."""
    claimers: int = 3
    session_timeout: float = 2.0
    """Of the claimers; the producer's is one second longer."""
    mean_gap: float = 1.2
    """Mean seconds between two faults."""
    drain_timeout: float = 40.0
    logs: str | None = None
    """Directory for the JSON-lines logs (a temporary one if not given; kept if given)."""

    @property
    def targets(self) -> list[str]:
        return [PRODUCER, *(f"c{i}" for i in range(self.claimers))]


@dataclass(frozen=True)
class Fault:
    """One fault: when (seconds into the run), what, on whom, how long or how much."""

    at: float
    kind: str
    target: str
    seconds: float = 0.0

    def describe(self) -> str:
        length = f" {self.seconds:.2f}s" if self.seconds else ""
        return f"{self.at:6.2f}s {self.kind} {self.target}{length}"


def seed_from_env(env: dict[str, str] | None = None) -> int:
    """``FAULT_SEED`` if set (to replay a run), else a fresh random seed."""
    value = (os.environ if env is None else env).get("FAULT_SEED", "").strip()
    return int(value) if value else random.SystemRandom().randrange(1, 10**9)


def schedule(config: Config) -> list[Fault]:
    """The faults of a run, in time order, chosen from ``config.seed`` alone."""
    rng = random.Random(config.seed)
    faults: list[Fault] = []
    at = rng.uniform(0.5, 1.5)
    while at < config.duration:
        faults.append(_one(rng, at, config))
        at += rng.expovariate(1.0 / config.mean_gap)
    for kind, target, seconds in _always(rng, config):  # in every run, whatever the seed
        faults.append(Fault(round(rng.uniform(0.15, 0.45) * config.duration, 2), kind, target, seconds))
    kills = max(1, int(config.duration // LEADER_EVERY))
    for index in range(kills):
        window = config.duration / kills
        faults.append(Fault(window * index + rng.uniform(0.3, 0.6) * window, "leader_kill", "ensemble",
                            round(rng.uniform(1.0, 2.0), 2)))
    return sorted(faults, key=lambda fault: fault.at)


def _always(rng: random.Random, config: Config) -> list[tuple[str, str, float]]:
    """A lost post reply, and claimers frozen past their session timeout."""
    frozen = round(config.session_timeout + 2.0, 2)
    return [("lose_post_reply", PRODUCER, 1.5), ("sigstop_long", rng.choice(config.targets[1:]), frozen),
            ("sigstop_long", rng.choice(config.targets[1:]), frozen)]


def _one(rng: random.Random, at: float, config: Config) -> Fault:
    timeout = config.session_timeout
    on_link = rng.random() < 0.6
    kinds = LINK_FAULTS if on_link else PROCESS_FAULTS
    kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
    if kind == "lose_post_reply":  # the reply to a post of a single job (one create)
        target = PRODUCER
    elif on_link:
        target = rng.choice(config.targets)
    else:
        target = rng.choice(config.targets[1:])
    seconds = {
        "lose_reply": rng.uniform(0.3, 1.2),  # how long the client cannot reconnect afterwards
        "lose_post_reply": rng.uniform(1.0, 2.0),  # below the producer's session timeout
        "lose_request": rng.uniform(0.0, 0.5),
        "stall_short": rng.uniform(0.3, 0.6) * timeout,
        "sigstop_short": rng.uniform(0.3, 0.6) * timeout,
        "stall_long": timeout + 1.0 + rng.uniform(0.5, 2.0),
        "sigstop_long": timeout + 1.0 + rng.uniform(0.5, 2.0),
    }.get(kind, 0.0)
    return Fault(round(at, 2), kind, target, round(seconds, 2))


@dataclass
class Report:
    """What a run did and found."""

    seed: int
    schedule: list[Fault]
    injected: dict[str, int] = field(default_factory=dict)
    proxy: dict[str, int] = field(default_factory=dict)
    """What the proxies did: lost_reply, lost_request, reset."""
    posts: dict[str, int] = field(default_factory=dict)
    """Post outcomes (ok, BackendUnavailable, ...)."""
    jobs: int = 0
    """Distinct jobs seen (posted or claimed)."""
    settles: dict[str, int] = field(default_factory=dict)
    """Settle call outcomes by kind and outcome."""
    errors: dict[str, int] = field(default_factory=dict)
    """The messages of the errors settles raised (job ids left out), with their counts."""
    violations: list[Any] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    logs: str = ""

    @property
    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for violation in self.violations:
            counts[violation.kind] = counts.get(violation.kind, 0) + 1
        return counts

    def text(self, *, details: int = 20) -> str:
        lines = [
            f"fault schedule seed {self.seed} (replay: FAULT_SEED={self.seed}); logs in {self.logs}",
            f"  jobs {self.jobs}; posts {self.posts}; settles {self.settles}",
            f"  faults injected {self.injected}; proxy {self.proxy}",
            f"  settle errors {self.errors}",
            f"  timings {{{', '.join(f'{k}: {v:.1f}s' for k, v in self.timings.items())}}}",
            f"  violations {len(self.violations)} {self.by_kind}",
        ]
        lines += [f"    {v.kind} {v.job}: {v.detail}" for v in self.violations[:details]]
        return "\n".join(lines)
