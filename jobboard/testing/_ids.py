"""Conformance: ``could_be_job_id`` and ``never_posted`` never say "never posted" of an id the board
gave a job, and ``never_posted`` says it of a well-formed id past the board's last one."""

from __future__ import annotations

from jobboard.board.contract import JobBoard, NewJob
from jobboard.testing._base import BoardOpener, ConformanceBase, bounded

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
    async def test_never_posted_of_a_well_formed_id_past_the_last_one(self, open_boards: BoardOpener) -> None:
        self.skip_if_unsupported("never_posted")
        poster, asker = await open_boards(), await open_boards()
        consumed, last = await poster.post("a"), await poster.post("b", priority="high")
        await poster.consume(await poster.claim(consumed, "w1"))
        ahead = self.next_id(last.id)
        assert asker.could_be_job_id(ahead), f"next_id() gave {ahead!r}, not of this board's form"
        assert await asker.never_posted(ahead), f"{ahead!r} is past the last id given ({last.id!r})"
        assert [job.id for job in (consumed, last) if await asker.never_posted(job.id)] == []
        assert (await poster.post("c", priority="high")).id == ahead, "next_id() is not the id given next"
        assert not await asker.never_posted(ahead)
        malformed = [text for text in NOT_IDS if not asker.could_be_job_id(text)]
        assert [text for text in malformed if not await asker.never_posted(text)] == []

    @bounded
    async def test_could_be_job_id_answers_any_string_without_raising(self, board: JobBoard) -> None:
        answers = [board.could_be_job_id(text) for text in NOT_IDS]
        assert all(isinstance(answer, bool) for answer in answers)
        assert not board.could_be_job_id(""), "no backend gives a job the empty id"
