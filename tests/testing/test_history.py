"""The history checker finds each violation in a synthetic history, and nothing in a clean one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.history import STUCK_AFTER, check, summary

Events = list[dict[str, Any]]


class Log:
    """Builds a synthetic history, one event per call, at increasing times."""

    def __init__(self) -> None:
        self.events: Events = []
        self.t = 100.0
        self.calls = 0

    def add(self, proc: str, ev: str, **fields: Any) -> None:
        self.t += 1.0
        self.events.append({"t": self.t, "proc": proc, "ev": ev, **fields})

    def post(self, tag: str, job: str | None, outcome: str = "ok") -> None:
        self.add("producer", "post", tag=tag, job=job, outcome=outcome)

    def claim(self, proc: str, job: str, gen: int, attempt: int | None = None, *, tag: str | None = None,
              deps: tuple[str, ...] = (), dep_results: tuple[Any, ...] = (), keep_result: bool = False) -> None:
        self.add(proc, "claim", job=job, tag=tag or f"tag-{job}", gen=gen,
                 attempt=gen if attempt is None else attempt, owner=proc, deps=list(deps),
                 dep_results=list(dep_results), keep_result=keep_result)

    def settle(self, proc: str, kind: str, job: str, gen: int, outcome: str | None = "ok", **args: Any) -> None:
        self.calls += 1
        self.add(proc, "call", id=self.calls, kind=kind, job=job, tag=f"tag-{job}", gen=gen, owner=proc, **args)
        if outcome is not None:
            self.add(proc, "done", id=self.calls, outcome=outcome)


def final(states: dict[str, str], *, left: Events | None = None, trashed: dict[str, str] | None = None,
          results: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"states": states, "left": left or [], "trashed": trashed or {}, "results": results or {}}


def claimed_by_w1() -> Log:
    """A log in which job a (tag-a) was posted, then claimed by w1 (its first attempt)."""
    log = Log()
    log.post("tag-a", "a")
    log.claim("w1", "a", 1)
    return log


def clean_log() -> tuple[Log, dict[str, Any]]:
    """Three jobs: a consumed, b abandoned then consumed, c (depends on a) consumed, d trashed."""
    log = Log()
    for job in "abcd":
        log.post(f"tag-{job}", job)
    log.claim("w1", "a", 1)
    log.settle("w1", "consume", "a", 1, result={"by": "w1"})
    log.claim("w2", "b", 1)
    log.settle("w2", "abandon", "b", 1, retry_after=0.5)
    log.claim("w1", "b", 3, attempt=2)
    log.settle("w1", "consume", "b", 3, result=None)
    log.claim("w2", "c", 1, deps=("a",), dep_results=({"by": "w1"},), keep_result=True)
    log.settle("w2", "consume", "c", 1, result=7)
    log.claim("w1", "d", 1)
    log.settle("w1", "trash", "d", 1, reason="bad")
    state = final({"a": "complete", "b": "complete", "c": "complete", "d": "trashed"},
                  trashed={"d": "bad"}, results={"c": 7})
    return log, state


def kinds(log: Log, state: dict[str, Any], **options: Any) -> dict[str, int]:
    return summary(check(log.events, state, **options))


def test_a_clean_history_has_no_violation() -> None:
    log, state = clean_log()
    assert check(log.events, state, clean=["w1", "w2"]) == []


def test_unknown_outcomes_and_refused_settles_are_not_violations() -> None:
    log, state = clean_log()
    log.post("tag-e", None, outcome="BackendUnavailable")
    log.claim("w1", "e", 1, tag="tag-e")
    log.settle("w1", "consume", "e", 1, outcome=None, result=1)  # killed mid-call
    log.claim("w2", "e", 2, tag="tag-e")
    log.settle("w2", "consume", "e", 2, outcome="ClaimLost", result=2)
    state["states"]["e"] = "complete"
    assert kinds(log, state) == {}


def test_an_escaped_exception_and_a_crash_are_found() -> None:
    log, state = clean_log()
    log.add("w1", "escape", where="consume", error="KeyError('x')")
    log.add("w2", "exit", code=1)
    assert kinds(log, state) == {"escape": 1, "crash": 1}


def test_an_acknowledged_post_that_vanished_is_lost() -> None:
    log, state = clean_log()
    log.post("tag-e", "e")
    state["states"]["e"] = "unclaimed"
    state["left"] = [{"job": "e", "tag": "tag-e"}]
    assert kinds(log, state) == {"lost": 1, "left-on-board": 1}


def test_two_acknowledged_consumes_are_found() -> None:
    log, state = clean_log()
    log.settle("w2", "consume", "a", 1, result={"by": "w2"})
    assert kinds(log, state) == {"double-consume": 1}


def test_a_consumed_job_that_ends_trashed_is_found() -> None:
    log, state = clean_log()
    state["states"]["a"] = "trashed"
    state["trashed"]["a"] = "max attempts exceeded"
    assert kinds(log, state) == {"consumed-and-trashed": 1}


def test_a_tag_posted_as_two_jobs_is_found() -> None:
    log, state = clean_log()
    log.claim("w1", "e", 1, tag="tag-a")
    log.settle("w1", "consume", "e", 1, result=None)
    state["states"]["e"] = "complete"
    assert kinds(log, state) == {"duplicate-post": 1}


def test_a_job_posted_twice_under_one_id_is_found() -> None:
    log, state = clean_log()
    log.claim("w2", "a", 1)  # a second copy of job a: attempt 1 again
    log.settle("w2", "consume", "a", 1, result={"by": "w2"})
    found = kinds(log, state)
    assert found["duplicate-post"] == 1
    assert found["double-consume"] == 1


def test_a_stale_consume_after_a_later_claim_is_found() -> None:
    log = claimed_by_w1()
    log.claim("w2", "a", 2)  # w1's session expired
    log.settle("w2", "consume", "a", 2, result=2)
    log.settle("w1", "consume", "a", 1, result=1)
    found = kinds(log, final({"a": "complete"}))
    assert found["stale-settle"] == 1


def test_a_stale_trash_is_found() -> None:
    log = claimed_by_w1()
    log.settle("w1", "trash", "a", 1, reason="gave up")
    log.claim("w2", "a", 2)
    log.settle("w2", "consume", "a", 2, result=2)
    found = kinds(log, final({"a": "complete"}))
    assert found["stale-settle"] == 1


def test_a_stale_abandon_is_found_by_its_delay() -> None:
    log = claimed_by_w1()
    log.settle("w1", "abandon", "a", 1, retry_after=30)  # w1 frozen: its lock already expired
    log.claim("w2", "a", 2)  # 1 s later, though the delay was 30 s
    log.settle("w2", "consume", "a", 2, result=2)
    assert kinds(log, final({"a": "complete"})) == {"stale-settle": 1}


def test_a_stale_abandon_without_delay_is_found_when_the_claim_came_first() -> None:
    log = claimed_by_w1()
    log.claim("w2", "a", 2)
    log.settle("w1", "abandon", "a", 1)
    log.settle("w2", "consume", "a", 2, result=2)
    assert kinds(log, final({"a": "complete"})) == {"stale-settle": 1}


@pytest.mark.parametrize("problem", ["wrong result", "no result", "before its dependency", "unconsumed"])
def test_a_dependent_without_its_dependency_result_is_found(problem: str) -> None:
    log = Log()
    log.post("tag-a", "a")
    log.post("tag-b", "b")
    log.claim("w1", "a", 1)
    if problem == "before its dependency":
        log.claim("w2", "b", 1, deps=("a",), dep_results=("ra",))
    if problem != "unconsumed":
        log.settle("w1", "consume", "a", 1, result="ra")
    received = {"wrong result": ("rx",), "no result": ()}.get(problem, ("ra",))
    if problem != "before its dependency":
        log.claim("w2", "b", 1, deps=("a",), dep_results=received)
    log.settle("w2", "consume", "b", 1, result="rb")
    state = final({"a": "complete" if problem != "unconsumed" else "unclaimed", "b": "complete"})
    assert kinds(log, state).get("dependency") == 1


def test_a_job_consumed_by_nobody_who_may_have_is_found() -> None:
    log = claimed_by_w1()
    log.settle("w1", "consume", "a", 1, outcome="ClaimLost", result=1)
    assert kinds(log, final({"a": "complete"})) == {"unexplained-complete": 1}


def test_a_kept_result_that_is_not_the_consume_result_is_found() -> None:
    log, state = clean_log()
    state["results"]["c"] = 8
    assert kinds(log, state) == {"result": 1}


def test_a_trashed_job_without_a_reason_is_found() -> None:
    log, state = clean_log()
    state["trashed"]["d"] = " "
    assert kinds(log, state) == {"trash-reason": 1}


def test_a_settle_that_stays_unavailable_without_faults_is_stuck() -> None:
    log = Log()
    log.post("tag-a", "a")
    log.claim("drain", "a", 1)
    for _ in range(STUCK_AFTER):
        log.settle("drain", "consume", "a", 1, outcome="BackendUnavailable", result=1)
    state = final({"a": "claimed"}, left=[{"job": "a", "tag": "tag-a"}])
    assert kinds(log, state, clean=["drain"]) == {"stuck": 1, "lost": 1, "left-on-board": 1}
    assert "stuck" not in kinds(log, state)  # under faults, a streak is not conclusive

