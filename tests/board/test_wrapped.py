"""WrappedBackend forwards every operation of the interface (review A1: ``claim_many`` and ``release`` were
not, so a board under ``--trace`` gave held jobs back as abandons), and says its inner backend's capabilities."""

from __future__ import annotations

import inspect
import uuid

import anyio
import pytest

from jobboard.backend import Backend
from jobboard.board.contract import JobBoard
from jobboard.board.registry import open_board
from jobboard.wrappers.wrapped import WrappedBackend
from jobboard_memory import MemoryBackend

NOT_FORWARDED = {"consume_and_claim_next", "use_options", "hub", "report_malformed"}
"""The interface's own (a wrapper sees both parts of a fused consume; the rest are the board's services)."""


def test_every_operation_of_the_interface_is_forwarded() -> None:
    members = {name for name, _ in inspect.getmembers(Backend) if not name.startswith("_")}
    operations = {name for name in members if callable(getattr(Backend, name)) or
                  isinstance(inspect.getattr_static(Backend, name), property)}
    missing = sorted(name for name in operations - NOT_FORWARDED if name not in vars(WrappedBackend))
    assert missing == [], f"WrappedBackend inherits the interface's default of {missing}"


async def test_a_wrapped_board_claims_many_and_releases_as_its_inner_one() -> None:
    with anyio.fail_after(10):
        async with open_board(f"memory://wrapped-{uuid.uuid4().hex}") as inner:
            board = JobBoard(WrappedBackend(inner.backend))
            assert board.releases_uncounted and board.claims_many_at_once is inner.claims_many_at_once
            job = await board.post("a", max_attempts=1)
            [claim] = await board.claim_many("w", 2)
            await board.release(claim)
            assert (await board.get(job)).attempts == 0  # uncounted, as the inner release does


@pytest.mark.parametrize("uncounted", [False, True])
async def test_a_wrapper_of_a_backend_with_the_defaults_says_so(uncounted: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a backend with the interface's release, the wrapper's release is an abandon (through its own settle)."""
    if not uncounted:
        monkeypatch.setattr(MemoryBackend, "release", Backend.release)
    with anyio.fail_after(10):
        async with open_board(f"memory://wrapped-{uuid.uuid4().hex}") as inner:
            board = JobBoard(WrappedBackend(inner.backend))
            assert board.releases_uncounted is uncounted and not board.claims_many_at_once
            job = await board.post("a")
            [claim] = await board.claim_many("w", 2)
            await board.release(claim)
            assert (await board.get(job)).attempts == (0 if uncounted else 1)
