"""Conformance: posting, listing, ordering, bad input, board lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from jobboard.board.contract import JobBoard
from jobboard.board.inputs import NewJob
from jobboard.errors import BoardClosed, InvalidJob, JobNotFound
from jobboard.job import JobState, Priority
from jobboard.testing._base import BoardMaker, BoardOpener, ConformanceBase, bounded, listed, listed_ids


class BasicsConformance(ConformanceBase):
    @bounded
    async def test_empty_board(self, board: JobBoard) -> None:
        assert await board.job_count() == 0
        assert await listed(board) == []
        assert await board.claim_next("w") is None
        assert [t async for t in board.trashed()] == []

    @bounded
    async def test_post_is_listed_at_once(self, board: JobBoard) -> None:
        job = await board.post("resize", {"url": "http://x/1.png"})
        assert await listed_ids(board) == [job.id]
        assert await board.job_count() == 1

    @bounded
    async def test_post_returns_the_job(self, board: JobBoard) -> None:
        job = await board.post("resize", {"n": 1, "tags": ["a", "b"]}, priority="high", max_attempts=3)
        assert (job.name, dict(job.details), job.priority) == ("resize", {"n": 1, "tags": ["a", "b"]},
                                                               Priority.HIGH)
        assert (job.attempts, job.max_attempts, job.depends_on) == (0, 3, ())
        fetched = await board.get(job.id)
        assert (fetched.id, fetched.name, dict(fetched.details)) == (job.id, "resize", dict(job.details))

    @bounded
    async def test_get_unknown_job(self, board: JobBoard) -> None:
        await board.post("a")
        with pytest.raises(JobNotFound):
            await board.get("job-that-does-not-exist")

    @bounded
    async def test_order_is_priority_then_fifo(self, board: JobBoard) -> None:
        low = await board.post("low", priority=Priority.LOW)
        first = await board.post("n1")
        urgent = await board.post("urgent", priority=Priority.VERY_HIGH)
        second = await board.post("n2")
        high = await board.post("high", priority=Priority.HIGH)
        expected = [urgent.id, high.id, first.id, second.id, low.id]
        assert await listed_ids(board) == expected

    @bounded
    async def test_priority_by_name_or_number(self, board: JobBoard) -> None:
        assert (await board.post("a", priority="very_low")).priority is Priority.VERY_LOW
        assert (await board.post("b", priority=1)).priority is Priority.HIGH

    @bounded
    async def test_bad_priority_writes_nothing(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match="priority"):
            await board.post("a", priority="urgent-ish")
        assert await board.job_count() == 0

    @pytest.mark.parametrize("name", ["", "   ", None, 42, "x" * 500, "tab\there"])
    @bounded
    async def test_bad_name_writes_nothing(self, board: JobBoard, name: object) -> None:
        with pytest.raises(InvalidJob):
            await board.post(name)  # type: ignore[arg-type]
        assert await board.job_count() == 0

    @bounded
    async def test_unencodable_details_name_the_key(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match="when"):
            await board.post("a", {"ok": 1, "when": object()})
        assert await board.job_count() == 0

    @bounded
    async def test_nested_unencodable_details_name_the_path(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match=r"inner.*\[1\]"):
            await board.post("a", {"inner": [1, {1, 2}]})
        assert await board.job_count() == 0

    @bounded
    async def test_non_mapping_details_refused(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match="mapping"):
            await board.post("a", ["not", "a", "dict"])  # type: ignore[arg-type]
        assert await board.job_count() == 0

    @bounded
    async def test_oversized_details_name_the_limit(self, board: JobBoard) -> None:
        limit = board.max_posting_bytes
        with pytest.raises(InvalidJob, match=str(limit)):
            await board.post("big", {"blob": b"x" * (limit + 1)})
        assert await board.job_count() == 0

    @bounded
    async def test_a_bad_job_timeout_is_refused_at_post(self, board: JobBoard) -> None:
        for bad in ("abc", 0, -1, float("inf"), float("nan"), True, None):
            with pytest.raises(InvalidJob, match=r"details\['jobboard.timeout'\] must be a positive number"):
                await board.post("a", {"jobboard.timeout": bad})
        assert await board.job_count() == 0
        posted = await board.post("a", {"jobboard.timeout": 2.5, "other": 1})
        assert posted.details["jobboard.timeout"] == 2.5

    @bounded
    async def test_bad_max_attempts_refused(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match="max_attempts"):
            await board.post("a", max_attempts=0)
        assert await board.job_count() == 0

    @bounded
    async def test_a_bool_max_attempts_is_refused(self, board: JobBoard) -> None:
        """``True`` is no count of attempts, though a bool passes ``isinstance(x, int)``: redis:// stored it as
        ``"True"`` and set the job aside as malformed at its claim (it vanished from the board)."""
        for bad in (True, False):
            with pytest.raises(InvalidJob, match="max_attempts"):
                await board.post("a", max_attempts=bad)
            with pytest.raises(InvalidJob, match="max_attempts"):
                await board.post_many([NewJob("a", max_attempts=bad)])
        assert await board.job_count() == 0

    @bounded
    async def test_second_board_sees_the_post(self, open_boards: BoardOpener) -> None:
        first, second = await open_boards(), await open_boards()
        job = await first.post("a", {"k": "v"})
        assert await listed_ids(second) == [job.id]
        assert dict((await second.get(job.id)).details) == {"k": "v"}

    @bounded
    async def test_states_through_a_life(self, board: JobBoard) -> None:
        job = await board.post("a")
        assert await board.state(job) is JobState.UNCLAIMED
        claim = await board.claim(job, "w1")
        assert await board.state(job.id) is JobState.CLAIMED
        await board.consume(claim)
        assert await board.state(job) is JobState.COMPLETE

    @bounded
    async def test_owner_is_none_unless_claimed(self, board: JobBoard) -> None:
        job = await board.post("a")
        assert await board.owner(job) is None
        claim = await board.claim(job, "w1")
        assert await board.owner(job) == "w1"
        await board.consume(claim)
        assert await board.owner(job) is None

    @bounded
    async def test_use_after_close_raises_board_closed(self, open_boards: BoardOpener) -> None:
        board = await open_boards()
        job = await board.post("a")
        await board.aclose()
        assert await calls_not_refused(board, job.id) == []
        await board.aclose()  # idempotent

    @bounded
    async def test_use_before_open_raises_board_closed(self, make_board: BoardMaker, board_url: str) -> None:
        board = make_board(board_url)
        assert await calls_not_refused(board, "never-posted") == []
        assert not board.is_open


async def calls_not_refused(board: JobBoard, job_id: str) -> list[str]:
    """The calls on ``board`` (not open) that do not raise ``BoardClosed``."""

    async def events() -> None:
        board.events()

    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "post": lambda: board.post("b"), "get": lambda: board.get(job_id), "claim": lambda: board.claim(job_id, "w"),
        "claim_next": lambda: board.claim_next("w"), "job_count": board.job_count,
        "state": lambda: board.state(job_id), "wait": board.wait,
        "wait_for_completion": lambda: board.wait_for_completion(job_id), "entities": board.entities,
        "iterjobs": lambda: listed(board), "events": events}
    not_refused = []
    for name, call in calls.items():
        try:
            await call()
        except BoardClosed:
            continue
        not_refused.append(name)
    return not_refused
