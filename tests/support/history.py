"""Check a job board's history: what every client believed happened, against the final state.

Pure: no I/O. Events are dicts (one JSON line each in the fault-schedule logs), each with
``t`` (wall-clock time it was written), ``proc`` and ``ev``:

- ``post``: ``tag``, ``outcome`` (``ok`` or the error's class name), ``job`` (when ok);
- ``claim`` (a claim that returned): ``job``, ``tag``, ``gen``, ``attempt``, ``owner``,
  ``deps`` (job ids), ``dep_results``, ``keep_result``; written after the claim returned;
- ``call`` (a settle about to be called, written before the call): ``id``, ``kind``
  (consume, abandon, trash), ``job``, ``tag``, ``gen``, ``owner``, ``result`` (consume),
  ``retry_after`` (abandon), ``reason`` (trash);
- ``done`` (what that call did): ``id``, ``outcome`` (``ok`` or the error's class name);
  a call without ``done`` (its process was killed) has an unknown outcome;
- ``escape``: an exception that is not a ``JobBoardError`` (``where``, ``error``);
- ``exit``: a process that ended on its own with ``code`` != 0.

The final state (read with faults off, after a drain): ``left`` (jobs still on the board,
``{"job", "tag"}``), ``states`` (job id -> ``complete``/``trashed``/``unclaimed``/...),
``trashed`` (job id -> reason), ``results`` (job id -> kept result, for keep_result jobs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = "unknown"
"""Outcome of a call whose process died before it returned."""
MAY_HAVE_APPLIED = frozenset({"ok", "BackendUnavailable", UNKNOWN})
"""Outcomes after which the settle may have been applied."""
STUCK_AFTER = 3
"""Transient errors in a row on one settle, in a clean (fault-free) process, that mean "never"."""

Event = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    job: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class Call:
    """A settle call with its outcome."""

    proc: str
    t: float
    kind: str
    job: str
    gen: int
    outcome: str
    args: Event


@dataclass
class History:
    """The events of every process, indexed."""

    posts: list[Event] = field(default_factory=list)
    claims: dict[str, list[Event]] = field(default_factory=lambda: defaultdict(list))
    calls: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    others: list[Event] = field(default_factory=list)
    tags: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, events: Iterable[Event]) -> History:
        history = cls()
        pending: dict[tuple[str, object], Event] = {}
        outcomes: dict[tuple[str, object], str] = {}
        for event in sorted(events, key=lambda e: e["t"]):
            kind = event["ev"]
            if kind == "post":
                history.posts.append(event)
                if event["outcome"] == "ok":
                    history.tags[event["tag"]].add(event["job"])
            elif kind == "claim":
                history.claims[event["job"]].append(event)
                history.tags[event["tag"]].add(event["job"])
            elif kind == "call":
                pending[event["proc"], event["id"]] = event
            elif kind == "done":
                outcomes[event["proc"], event["id"]] = event["outcome"]
            else:
                history.others.append(event)
        for key, call in pending.items():
            history.calls[call["job"]].append(Call(call["proc"], call["t"], call["kind"], call["job"],
                                                   call["gen"], outcomes.get(key, UNKNOWN), call))
        return history

    def acked(self, job: str, *kinds: str) -> list[Call]:
        return [c for c in self.calls.get(job, []) if c.outcome == "ok" and c.kind in kinds]


def check(events: Iterable[Event], final: Mapping[str, Any], *, clean: Iterable[str] = ()) -> list[Violation]:
    """Every invariant violated by the history and the final state (empty: all hold).

    :param clean: processes that ran without faults (a transient error streak there is "stuck").
    """
    history = History.of(events)
    found: list[Violation] = []
    for rule in (_escapes, _posts_kept, _nothing_left, _single_consume, _no_duplicates, _stale_settles,
                 _dependencies, _completes_explained, _results_kept, _trash_reasons):
        found += rule(history, final)
    found += _stuck(history, frozenset(clean))
    return found


def summary(violations: Iterable[Violation]) -> dict[str, int]:
    """Violations counted by kind."""
    return dict(Counter(v.kind for v in violations))


def _escapes(history: History, final: Mapping[str, Any]) -> list[Violation]:
    found = []
    for event in history.others:
        if event["ev"] == "escape":
            found.append(Violation("escape", event.get("job"),
                                   f"{event['proc']}: {event['error']} escaped from {event['where']}"))
        elif event["ev"] == "exit":
            found.append(Violation("crash", None, f"{event['proc']} exited with {event['code']}"))
    return found


def _posts_kept(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """Every acknowledged post ends consumed or trashed."""
    found = []
    for post in history.posts:
        if post["outcome"] != "ok":
            continue
        state = final["states"].get(post["job"], "missing")
        if state not in ("complete", "trashed"):
            found.append(Violation("lost", post["job"], f"posted {post['tag']} ends {state}"))
    return found


def _nothing_left(history: History, final: Mapping[str, Any]) -> list[Violation]:
    return [Violation("left-on-board", left["job"], f"{left.get('tag')} still on the board after the drain")
            for left in final["left"]]


def _single_consume(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """At most one terminal settle acknowledged per job; a consumed job is not in the trash."""
    found = []
    for job in history.calls:
        terminal = history.acked(job, "consume", "trash")
        consumes = [c for c in terminal if c.kind == "consume"]
        if len(terminal) > 1:
            who = ", ".join(f"{c.kind} by {c.proc} at generation {c.gen}" for c in terminal)
            found.append(Violation("double-consume", job, f"settled {len(terminal)} times: {who}"))
        if consumes and final["states"].get(job) == "trashed":
            found.append(Violation("consumed-and-trashed", job,
                                   f"consume by {consumes[0].proc} acknowledged, but the job ends trashed"))
    return found


def _no_duplicates(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """A post makes one job: one id per tag, and each attempt of a job handed out once."""
    found = []
    for tag, jobs in history.tags.items():
        if len(jobs) > 1:
            found.append(Violation("duplicate-post", None, f"tag {tag} posted as jobs {sorted(jobs)}"))
    for job, claims in history.claims.items():
        attempts = Counter(claim["attempt"] for claim in claims)
        for attempt, count in sorted(attempts.items()):
            if count > 1:
                owners = [c["owner"] for c in claims if c["attempt"] == attempt]
                found.append(Violation("duplicate-post", job, f"attempt {attempt} handed out {count} times "
                                       f"(to {owners}): two copies of the job, or a claim that lied"))
    return found


def _stale_settles(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """No settle acknowledged for a generation older than a claim it cannot have preceded."""
    found = []
    for job, calls in history.calls.items():
        claims = history.claims.get(job, [])
        for call in calls:
            if call.outcome != "ok":
                continue
            later = [c for c in claims if c["gen"] > call.gen]
            if call.kind == "abandon":  # must have been applied before the next claim was made
                not_before = call.t + (call.args.get("retry_after") or 0.0)
                later = [c for c in later if c["t"] < not_before]
            if later:
                first = min(later, key=lambda c: c["t"])
                found.append(Violation(
                    "stale-settle", job, f"{call.kind} by {call.proc} at generation {call.gen} acknowledged, "
                    f"but {first['owner']} claimed generation {first['gen']} at {first['t']:.3f} "
                    f"(the call started at {call.t:.3f})"))
    return found


def _dependencies(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """A dependent is claimed after each dependency's consume, with that consume's result."""
    found = []
    for job, claims in history.claims.items():
        for claim in claims:
            deps, results = list(claim.get("deps", ())), list(claim.get("dep_results", ()))
            if len(deps) != len(results):
                found.append(Violation("dependency", job, f"claimed with {len(results)} results "
                                       f"for {len(deps)} dependencies"))
                continue
            for dep, result in zip(deps, results, strict=True):
                if (problem := _delivery_problem(history, dep, result, claim)) is not None:
                    found.append(Violation("dependency", job, f"dependency {dep}: {problem}"))
    return found


def _delivery_problem(history: History, dep: str, result: Any, claim: Event) -> str | None:
    consumes = [c for c in history.calls.get(dep, []) if c.kind == "consume"]
    sent = [c for c in consumes if c.args.get("result") == result and c.outcome in MAY_HAVE_APPLIED]
    if not sent:
        return f"received {result!r}, which no consume of it that may have applied sent"
    acked = [c for c in consumes if c.outcome == "ok"]
    if acked and all(c.args.get("result") != result for c in acked):
        return f"received {result!r}, not the acknowledged consume's {acked[0].args.get('result')!r}"
    if claim["t"] < min(c.t for c in sent):
        return "the dependent was claimed before its dependency's consume was called"
    return None


def _completes_explained(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """A job that ends consumed had a consume that may have applied (not only refused ones)."""
    found = []
    for job, state in final["states"].items():
        if state != "complete":
            continue
        consumes = [c for c in history.calls.get(job, []) if c.kind == "consume"]
        if not any(c.outcome in MAY_HAVE_APPLIED for c in consumes):
            outcomes = [c.outcome for c in consumes] or "no consume at all"
            found.append(Violation("unexplained-complete", job, f"ends consumed after {outcomes}"))
    return found


def _results_kept(history: History, final: Mapping[str, Any]) -> list[Violation]:
    """A consumed keep_result job keeps the result of the consume that applied."""
    found = []
    for job, claims in history.claims.items():
        if not claims[0].get("keep_result") or final["states"].get(job) != "complete":
            continue
        kept = final["results"].get(job)
        acked = history.acked(job, "consume")
        possible = [c.args.get("result") for c in history.calls.get(job, [])
                    if c.kind == "consume" and c.outcome in MAY_HAVE_APPLIED]
        expected = [c.args.get("result") for c in acked] or possible
        if kept not in expected:
            found.append(Violation("result", job, f"kept result {kept!r}, expected one of {expected!r}"))
    return found


def _trash_reasons(history: History, final: Mapping[str, Any]) -> list[Violation]:
    return [Violation("trash-reason", job, f"trashed with reason {reason!r}")
            for job, reason in final["trashed"].items() if not str(reason or "").strip()]


def _stuck(history: History, clean: frozenset[str]) -> list[Violation]:
    """In a fault-free process, a settle that keeps raising a transient error never resolves."""
    found = []
    for job, calls in history.calls.items():
        streaks: Counter[tuple[str, int, str]] = Counter()
        for call in sorted(calls, key=lambda c: c.t):
            if call.proc not in clean:
                continue
            key = (call.proc, call.gen, call.kind)
            streaks[key] = streaks[key] + 1 if call.outcome == "BackendUnavailable" else 0
            if streaks[key] == STUCK_AFTER:
                found.append(Violation("stuck", job, f"{call.kind} by {call.proc} raised BackendUnavailable "
                                       f"{STUCK_AFTER} times in a row with no fault injected"))
    return found
