"""Plumbing of the model-based test: boards in an event loop of their own, paired steps."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import ClassVar, TypeVar

import anyio
from anyio.from_thread import start_blocking_portal
from hypothesis import event
from hypothesis.stateful import RuleBasedStateMachine

from jobboard.board.contract import JobBoard
from jobboard.board.registry import open_board
from jobboard.errors import JobBoardError
from jobboard.job import Claim
from jobboard.testing import _model_checks as checks
from jobboard.testing.model import ContractModel, ModelClaim

T = TypeVar("T")
M = TypeVar("M")

SLOTS = 3
NAME_FILTERS: tuple[tuple[str, ...] | None, ...] = (None, ("a",), ("a", "b"), ("c", "jobboard.gate"))
"""The ``names`` a claimer asks for (``jobboard.gate`` is an internal name: only asked for by name)."""
FLOOR = 0.02
"""The least share of a run's steps that must be successful claims, and again successful settles (seen:
4-12 % of the steps on each backend)."""


def check_floor(tally: Counter[str], examples: int, floor: float) -> None:
    """Fail a run that tested too little: fewer examples than asked for, or fewer successful claims or
    settles than ``floor`` times its steps (as when every claim fails, on the board and in the model alike)."""
    assert tally["example"] >= examples, f"the model test ran {tally['example']} examples of {examples}"
    wanted = math.ceil(floor * tally["step"])
    short = {what: tally[what] for what in ("claimed", "settled") if tally[what] < wanted}
    assert not short, (f"the model test made too few successful claims or settles in {tally['step']} steps: "
                       f"{short}; at least {wanted} of each wanted")


class MachineBase(RuleBasedStateMachine):
    """``SLOTS`` boards on one fresh URL, a model, and how to run a step on both."""

    url_factory: ClassVar[Callable[[], str]]
    """A fresh, empty board URL for each example."""
    call_timeout: ClassVar[float] = 15.0
    """Seconds any one board call may take."""
    model_class: ClassVar[type[ContractModel]] = ContractModel
    tally: ClassVar[Counter[str]] = Counter()
    """What the steps did (``run_model_test`` gives each run its own and prints it)."""

    def __init__(self) -> None:
        super().__init__()
        self._exit = ExitStack()
        self.portal = self._exit.enter_context(start_blocking_portal("asyncio"))
        self.url = type(self).url_factory()
        self.model = self.model_class()
        self.ids = checks.Ids()
        self.boards: list[JobBoard | None] = [None] * SLOTS
        self.closed: list[JobBoard] = []
        self.claims: list[tuple[ModelClaim, Claim]] = []
        self.outcomes_checked: set[int] = set()
        self.turn = 0
        """Which open board the next full check reads through."""
        self.keyed = False
        """Whether the backend's ``post`` takes ``key`` (idempotent posts)."""

    def teardown(self) -> None:
        try:
            for board in self.boards:
                if board is not None:
                    self.call(board.aclose)
        finally:
            self._exit.close()

    def note(self, what: str) -> None:
        event(what)
        self.tally[what] += 1

    # -- running calls -------------------------------------------------------

    def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` on the boards' event loop, bounded by ``call_timeout``."""

        async def bounded() -> T:
            with anyio.fail_after(self.call_timeout):
                return await work()

        return self.portal.call(bounded)

    def expect(
        self, what: str, model_op: Callable[[], M], board_op: Callable[[], Awaitable[T]],
    ) -> tuple[M, T] | None:
        """Run one step on the model and on a board: both succeed, or both raise the same error.

        Returns both results, or ``None`` when both raised.
        """
        try:
            expected = model_op()
        except JobBoardError as error:
            self.note(f"{what}: {type(error).__name__}")
            self.expect_error(type(error), board_op)
            return None
        self.note(f"{what}: ok")
        try:
            return expected, self.call(board_op)
        except JobBoardError as error:
            raise AssertionError(f"{what}: the board raised {error!r}; the model expected success") from error

    def expect_error(self, error: type[JobBoardError], board_op: Callable[[], Awaitable[object]]) -> None:
        try:
            returned = self.call(board_op)
        except JobBoardError as raised:
            assert type(raised) is error, f"the board raised {raised!r}; the model expected {error.__name__}"
            return
        raise AssertionError(f"the board returned {returned!r}; the model expected {error.__name__}")

    # -- boards --------------------------------------------------------------

    def open_slot(self, slot: int) -> None:
        board = open_board(self.url)
        self.call(board.open)
        self.boards[slot] = board
        self.keyed = "key" in inspect.signature(board.post).parameters

    def close_slot(self, slot: int) -> None:
        board = self.boards[slot]
        assert board is not None
        self.call(board.aclose)
        self.boards[slot] = None
        self.closed.append(board)
        self.model.close(slot)

    def open_boards(self) -> list[JobBoard]:
        return [board for board in self.boards if board is not None]

    def board_at(self, pick: int) -> tuple[int, JobBoard]:
        """An open board (and its slot)."""
        slots = [slot for slot, board in enumerate(self.boards) if board is not None]
        slot = slots[pick % len(slots)]
        board = self.boards[slot]
        assert board is not None
        return slot, board

    # -- choosing ------------------------------------------------------------

    def job_at(self, pick: int, anywhere: bool) -> int:
        """A job of the model: any job ever posted, or (when there is one) a job on the board."""
        on_board = [job.index for job in self.model.board()]
        pool = on_board if on_board and not anywhere else range(len(self.model.jobs))
        return pool[pick % len(pool)]

    def is_current(self, claim: ModelClaim) -> bool:
        try:
            self.model.current(claim)
        except JobBoardError:
            return False
        return True

    def has_jobs_on_board(self) -> bool:
        return any(job.on_board for job in self.model.jobs)

    def has_claims(self) -> bool:
        return bool(self.claims)
