"""A stateful, model-based test of the :class:`~jobboard.board.contract.JobBoard` contract.

Needs hypothesis (``pip install hypothesis``); ``jobboard.testing`` itself does not
import this module. Random sequences of post / claim / claim_next / consume /
abandon / trash (with current, stale and forged claims) / cancel / closing and
reopening boards run on three boards opened on ONE URL, and after every step the
boards are compared with :class:`~jobboard.testing.model.ContractModel`: every
board's count; then, through one board in turn, both listings and their order,
each job's state, owner and snapshot, the trash with its reasons and order, and
the outcome of each job that left the board. Each claim handed out is checked
too (job, owner, attempt, a generation above the job's earlier ones, dependency
results). Use it from a backend's tests::

    from jobboard.testing.stateful import run_model_test

    def test_contract_model() -> None:
        run_model_test(lambda: f"mine://localhost/{uuid.uuid4().hex}")  # a fresh board per example

Hypothesis runs synchronously: the boards live in an event loop of their own
(an anyio blocking portal) and every call is bounded by ``call_timeout``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from typing import Any, ClassVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as use_seed
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule, run_state_machine_as_test

from jobboard.board.contract import JobBoard
from jobboard.job import Claim, Job, JobState, Priority
from jobboard.testing import _model_checks as checks
from jobboard.testing._machine import FLOOR, NAME_FILTERS, SLOTS, MachineBase, check_floor
from jobboard.testing._probes import Probes
from jobboard.testing.model import ModelClaim, ModelJob

NAMES = ("a", "b", "c", "jobboard.gate")
LONG_DELAY = 3600.0
"""A ``retry_after`` that does not end during a test: the job stays unclaimable."""
KEYS = ("k1", "k2", "k3")

SLOT = st.integers(0, SLOTS - 1)
PICK = st.integers(0, 1000)
OWNER = st.sampled_from(("w1", "w2", "w3"))
VALUES = st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(("x", "")),
                   st.lists(st.integers(0, 3), max_size=2), st.fixed_dictionaries({"v": st.integers(0, 9)}))
REASON = st.sampled_from(("bad input", "not needed", "r"))
USUALLY = st.sampled_from((True, True, True, False))
RARELY = st.sampled_from((False, False, False, True))


@dataclasses.dataclass(frozen=True)
class PostSpec:
    name: str
    priority: Priority
    deps: tuple[int, ...]
    """Picks among the jobs on the board (duplicates dropped)."""
    max_attempts: int | None
    keep_result: bool
    details: dict[str, Any]


POSTS = st.builds(
    PostSpec, name=st.sampled_from(NAMES), priority=st.sampled_from(Priority),
    deps=st.one_of(st.just(()), st.lists(PICK, min_size=1, max_size=3).map(tuple)),
    max_attempts=st.sampled_from((None, 1, 2, 3)), keep_result=st.booleans(),
    details=st.one_of(st.just({}), st.fixed_dictionaries({"n": st.integers(0, 99)})),
)


@dataclasses.dataclass(frozen=True)
class Settle:
    action: str
    result: Any = None
    delay: float | None = None
    reason: str = ""


SETTLES = st.builds(Settle, action=st.sampled_from(("consume", "consume", "abandon", "trash")), result=VALUES,
                    delay=st.sampled_from((None, 0.0, LONG_DELAY)), reason=REASON)
THEN = st.one_of(st.none(), SETTLES)


class JobBoardMachine(Probes):
    """Drives three boards on one fresh URL and a :class:`ContractModel` side by side.

    Subclass it (or use :func:`run_model_test`) and set ``url_factory``.
    """

    claim_next_best_first: ClassVar[bool] = True
    """Whether ``claim_next`` must hand out the model's best job and ``wait`` the first claimable
    ones; when False, any job it may hand out is accepted (and which exhausted jobs it trashed on
    the way is read back), and ``wait`` may return any claimable ones, in board order."""
    trash_diamonds: ClassVar[bool] = True
    """Whether to trash (cancel, trash, or exhaust) a job that reaches one of its dependents
    along two paths; when False, steps that would are skipped."""

    @initialize(posts=st.lists(POSTS, min_size=2, max_size=6))
    def start(self, posts: list[PostSpec]) -> None:
        self.tally["example"] += 1
        for slot in range(SLOTS):
            self.open_slot(slot)
        for spec in posts:
            self.post_one(0, spec, None)

    # -- producing -------------------------------------------------------------

    def record(self, expected: ModelJob, job: Job) -> None:
        self.ids.add(job)
        checks.check_job(job, expected, self.ids, "post")

    @rule(pick=SLOT, specs=st.lists(POSTS, min_size=1, max_size=3),
          bad=st.sampled_from((None, None, None, "named twice", "not on the board")))
    def post(self, pick: int, specs: list[PostSpec], bad: str | None) -> None:
        """Post jobs, maybe linked to jobs on the board; the last maybe with a bad dependency
        (``InvalidJob``, nothing written)."""
        for spec in specs[:-1]:
            self.post_one(pick, spec, None)
        self.post_one(pick, specs[-1], bad)

    def post_one(self, pick: int, spec: PostSpec, bad: str | None) -> None:
        _, board = self.board_at(pick)
        on_board = [job.index for job in self.model.board()]
        gone = [job.index for job in self.model.jobs if not job.on_board]
        if bad == "named twice" and on_board:
            depends: tuple[int, ...] = (on_board[0], on_board[0])
        elif bad == "not on the board" and gone:
            depends = (gone[spec.deps[0] % len(gone)] if spec.deps else gone[0],)
        else:
            bad = None
            picked = [on_board[dep % len(on_board)] for dep in spec.deps] if on_board else []
            depends = tuple(dict.fromkeys(picked))
        both = self.expect(
            f"post ({bad or 'linked' if depends else 'single'})",
            lambda: self.model.post(spec.name, priority=spec.priority, depends_on=depends,
                                    max_attempts=spec.max_attempts, keep_result=spec.keep_result,
                                    details=spec.details),
            lambda: board.post(spec.name, spec.details, priority=spec.priority,
                               depends_on=[self.ids[dep] for dep in depends], max_attempts=spec.max_attempts,
                               keep_result=spec.keep_result))
        if both is not None:
            self.record(*both)

    @precondition(lambda self: self.keyed)
    @rule(pick=SLOT, key=st.sampled_from(KEYS), spec=POSTS)
    def post_with_key(self, pick: int, key: str, spec: PostSpec) -> None:
        """While a job posted with ``key`` is on the board or was settled (within the retention
        window, longer than any test), posting with ``key`` returns it and posts nothing."""
        _, board = self.board_at(pick)
        known = key in self.model.keys
        self.note(f"post with a key: {'known' if known else 'new'}")
        expected = self.model.post(spec.name, priority=spec.priority, key=key, details=spec.details)
        keyed_post: Any = board.post  # ``key`` is newer than some backends
        job = self.call(lambda: keyed_post(spec.name, spec.details, priority=spec.priority, key=key))
        if known:
            assert job.id == self.ids[expected.index], (
                f"post(key={key!r}) made {job.id}, not the existing job")
        else:
            self.record(expected, job)

    def avoided(self, jobs: list[int]) -> bool:
        """Whether this step would trash a diamond on a backend that cannot (see ``trash_diamonds``)."""
        if self.trash_diamonds or not any(self.model.reaches_twice(job) for job in jobs):
            return False
        self.note("skipped: it would trash a diamond")
        return True

    # -- claiming --------------------------------------------------------------

    def record_claim(self, expected: ModelClaim, claim: Claim) -> None:
        checks.check_claim(claim, expected, self.model, self.ids)
        self.claims.append((expected, claim))
        self.tally["claimed"] += 1

    @precondition(MachineBase.has_jobs_on_board)
    @rule(pick=SLOT, job=PICK, anywhere=RARELY, owner=OWNER, then=THEN)
    def claim(self, pick: int, job: int, anywhere: bool, owner: str, then: Settle | None) -> None:
        """Claim a job by id (usually one on the board); maybe settle it at once."""
        slot, board = self.board_at(pick)
        index = self.job_at(job, anywhere)
        if self.model.jobs[index].exhausted and self.avoided([index]):
            return
        both = self.expect("claim", lambda: self.model.claim(index, owner, slot),
                           lambda: board.claim(self.ids[index], owner))
        if both is not None:
            self.record_claim(*both)
            if then is not None:
                self.settle_one(pick, *both, then, "")

    @rule(pick=SLOT, owner=OWNER, names=st.sampled_from(NAME_FILTERS), then=THEN)
    def claim_next(self, pick: int, owner: str, names: tuple[str, ...] | None, then: Settle | None) -> None:
        """Claim the next job; maybe settle it at once, like a worker (through another board, maybe)."""
        taken = self.take_next(pick, owner, names)
        if taken is not None and then is not None:
            self.settle_one(pick + 1, *taken, then, "")

    def take_next(
        self, pick: int, owner: str, names: tuple[str, ...] | None,
    ) -> tuple[ModelClaim, Claim] | None:
        slot, board = self.board_at(pick)
        if self.avoided([job.index for job in self.model.candidates(names) if job.exhausted]):
            return None
        if not self.claim_next_best_first:
            return self.take_any(slot, board, owner, names)
        expected = self.model.claim_next(owner, slot, names)
        self.note(f"claim_next: {'a job' if expected else 'none'}")
        claim = self.call(lambda: board.claim_next(owner, names=names))
        if expected is None or claim is None:
            got = None if claim is None else claim.job.id
            wanted = None if expected is None else self.ids[expected.job]
            assert got == wanted, f"claim_next(names={names}) handed out {got}, the model says {wanted}"
            return None
        self.record_claim(expected, claim)
        return expected, claim

    def take_any(
        self, slot: int, board: JobBoard, owner: str, names: Collection[str] | None,
    ) -> tuple[ModelClaim, Claim] | None:
        """``claim_next`` on a backend that may hand out any claimable job, not the best one."""
        candidates = self.model.candidates(names)
        claim = self.call(lambda: board.claim_next(owner, names=names))
        self.note(f"claim_next: {'a job' if claim else 'none'}")
        if claim is None:
            assert all(job.exhausted for job in candidates), f"claim_next(names={names}) found nothing"
            self.model.claim_next(owner, slot, names)
            return None
        group = self.model.new_group()
        for job in candidates:
            job_id = self.ids[job.index]
            if job.exhausted and self.call(lambda: board.state(job_id)) is JobState.TRASHED:  # noqa: B023
                self.model.trash_exhausted(job.index, group)
        assert claim.job.id in self.ids.ids, f"claim_next handed out {claim.job.id}, which was never posted"
        expected = self.model.claim_chosen(self.ids.ids.index(claim.job.id), owner, slot, names)
        self.record_claim(expected, claim)
        return expected, claim

    # -- settling ----------------------------------------------------------------

    @precondition(MachineBase.has_claims)
    @rule(pick=SLOT, which=PICK, current=USUALLY, forged=RARELY, how=SETTLES)
    def settle(self, pick: int, which: int, current: bool, forged: bool, how: Settle) -> None:
        """Settle a current claim or any claim (stale: ``ClaimLost``), maybe presented by another
        owner (``NotOwner`` if current), through any open board."""
        live = [pair for pair in self.claims if self.is_current(pair[0])]
        pool = live if current and live else self.claims
        expected, claim = pool[which % len(pool)]
        if forged:
            expected = dataclasses.replace(expected, owner=f"{expected.owner}-forged")
            claim = dataclasses.replace(claim, owner=expected.owner)
        self.settle_one(pick, expected, claim, how, " (forged)" if forged else "")

    def settle_one(self, pick: int, expected: ModelClaim, claim: Claim, how: Settle, forged: str) -> None:
        _, board = self.board_at(pick)
        if how.action == "trash" and self.is_current(expected) and self.avoided([expected.job]):
            return
        steps: dict[str, tuple[Callable[[], None], Callable[[], Awaitable[None]]]] = {
            "consume": (lambda: self.model.consume(expected, how.result),
                        lambda: board.consume(claim, how.result)),
            "abandon": (lambda: self.model.abandon(expected, delayed=bool(how.delay)),
                        lambda: board.abandon(claim, retry_after=how.delay)),
            "trash": (lambda: self.model.trash(expected, how.reason), lambda: board.trash(claim, how.reason)),
        }
        if self.expect(f"{how.action}{forged}", *steps[how.action]) is not None:
            self.tally["settled"] += 1

    @precondition(MachineBase.has_jobs_on_board)
    @rule(pick=SLOT, job=PICK, anywhere=RARELY, reason=REASON)
    def cancel(self, pick: int, job: int, anywhere: bool, reason: str) -> None:
        _, board = self.board_at(pick)
        index = self.job_at(job, anywhere)
        if self.avoided([index]):
            return
        self.expect("cancel", lambda: self.model.cancel(index, reason),
                    lambda: board.cancel(self.ids[index], reason))

    # -- boards ------------------------------------------------------------------

    @rule(pick=PICK, probe=st.sampled_from(("close or reopen", "unknown job", "close or reopen",
                                            "closed board", "pending outcome", "watch a claim", "wait")))
    def probe(self, pick: int, probe: str) -> None:
        """Close a board (its claims go back on the board, attempts counted) or reopen a closed
        slot; or reads, waits and refusals that change nothing."""
        if probe == "close or reopen":
            self.close_or_reopen(pick % SLOTS)
            return
        probes: dict[str, Callable[[JobBoard, int], bool]] = {
            "unknown job": self.unknown_job, "closed board": self.closed_board,
            "pending outcome": self.pending_outcome, "watch a claim": self.watch_a_claim, "wait": self.wait,
        }
        if probes[probe](self.board_at(pick)[1], pick):
            self.note(f"probe: {probe}")

    # -- checking --------------------------------------------------------------

    @invariant()
    def boards_match_the_model(self) -> None:
        """Every open board counts the model's jobs; one of them (in turn) is checked in full."""
        boards = self.open_boards()
        if not boards:
            return  # before the boards are opened
        self.tally["step"] += 1
        expected = len(self.model.board())
        for board in boards:
            count = self.call(board.job_count)
            assert count == expected, f"job_count {count} on {board.url}, the model says {expected}"
        self.turn += 1
        board = boards[self.turn % len(boards)]
        self.call(lambda: checks.check_board(board, self.model, self.ids))
        self.call(lambda: checks.check_trash(board, self.model, self.ids))
        for job in self.model.jobs:
            if not job.on_board and job.index not in self.outcomes_checked:
                self.call(lambda: checks.check_outcome(board, job, self.ids, self.model))  # noqa: B023
                self.outcomes_checked.add(job.index)


def model_settings(*, examples: int, steps: int, shrink: bool) -> settings:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                    phases=phases, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def run_model_test(
    url_factory: Callable[[], str], *, examples: int = 30, steps: int = 30, seed: int | None = 0,
    shrink: bool = False, claim_next_best_first: bool = True, trash_diamonds: bool = True,
    machine: type[JobBoardMachine] = JobBoardMachine, floor: float = FLOOR,
) -> Counter[str]:
    """Run the model-based test on fresh boards from ``url_factory``; returns the tally of steps.

    Environment variables override the arguments: ``JOBBOARD_MODEL_EXAMPLES``,
    ``JOBBOARD_MODEL_STEPS``, ``JOBBOARD_MODEL_SEED`` and ``JOBBOARD_MODEL_SHRINK=1``
    (shrink a failing example to a minimal one: minutes on a remote backend).
    A run whose examples are set that way (or with ``seed=None``) draws a random
    seed unless one is given. The seed is printed: ``JOBBOARD_MODEL_SEED=<seed>``
    replays the run. ``claim_next_best_first`` and ``trash_diamonds``: see
    :class:`JobBoardMachine`. A run that passes fails all the same if it ran fewer
    examples than asked for, or if successful claims or successful settles were
    each fewer than ``floor`` times its steps.
    """
    wanted = int(os.environ.get("JOBBOARD_MODEL_EXAMPLES", examples))
    steps = int(os.environ.get("JOBBOARD_MODEL_STEPS", steps))
    shrink = os.environ.get("JOBBOARD_MODEL_SHRINK", "1" if shrink else "0") == "1"
    if "JOBBOARD_MODEL_SEED" in os.environ:
        seed = int(os.environ["JOBBOARD_MODEL_SEED"])
    elif seed is None or "JOBBOARD_MODEL_EXAMPLES" in os.environ:
        seed = random.randrange(2**32)
    print(f"jobboard model test: up to {wanted} examples of up to {steps} steps, "  # noqa: T201
          f"JOBBOARD_MODEL_SEED={seed}{' (shrinking failures)' if shrink else ''}")
    tally: Counter[str] = Counter()
    attributes = {"url_factory": staticmethod(url_factory), "claim_next_best_first": claim_next_best_first,
                  "trash_diamonds": trash_diamonds, "tally": tally}
    runner = use_seed(seed)(type(f"{machine.__name__}Run", (machine,), attributes))
    started = time.monotonic()
    try:
        run_state_machine_as_test(
            runner, settings=model_settings(examples=wanted, steps=steps, shrink=shrink))
        check_floor(tally, wanted, floor)
    finally:
        print(f"jobboard model test: {tally['example']} examples, {tally['step']} steps "  # noqa: T201
              f"in {time.monotonic() - started:.1f} s; "
              + ", ".join(f"{what} x{count}" for what, count in sorted(tally.items())))
    return tally


__all__ = ["JobBoardMachine", "model_settings", "run_model_test"]
