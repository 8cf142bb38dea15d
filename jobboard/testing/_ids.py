"""Conformance: ``could_be_job_id`` never says "never posted" of an id the board gave a job."""

from __future__ import annotations

from jobboard.board import JobBoard, NewJob
from jobboard.testing._base import ConformanceBase, bounded

NOT_IDS = ("", " ", "x", "é", "../jobs", "\x00", "9" * 400)


class IdsConformance(ConformanceBase):
    @bounded
    async def test_every_id_the_board_gave_could_be_a_job_id(self, board: JobBoard) -> None:
        consumed, trashed, waiting = await board.post("a"), await board.post("b"), await board.post("c")
        linked = await board.post("d", depends_on=[waiting])
        many = await board.post_many([NewJob("e"), NewJob("f")])
        await board.consume(await board.claim(consumed, "w1"))
        await board.cancel(trashed, "not wanted")
        ids = [consumed.id, trashed.id, waiting.id, linked.id, *(job.id for job in many)]
        assert [job_id for job_id in ids if not board.could_be_job_id(job_id)] == []
        assert [job_id for job_id in ids if await board.never_posted(job_id)] == []

    @bounded
    async def test_never_posted_of_ids_it_cannot_have_given(self, board: JobBoard) -> None:
        await board.post("a")
        assert await board.never_posted("")
        assert all([await board.never_posted(text) for text in NOT_IDS if not board.could_be_job_id(text)])

    @bounded
    async def test_could_be_job_id_answers_any_string_without_raising(self, board: JobBoard) -> None:
        answers = [board.could_be_job_id(text) for text in NOT_IDS]
        assert all(isinstance(answer, bool) for answer in answers)
        assert not board.could_be_job_id(""), "no backend gives a job the empty id"
