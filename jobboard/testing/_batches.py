"""Conformance: batches (``post_many``) and the fused ``consume_and_claim_next``."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jobboard.board.contract import JobBoard, NewJob
from jobboard.errors import ClaimLost, DependencyMissing, InvalidJob
from jobboard.job import JobState
from jobboard.testing._base import ConformanceBase, bounded, listed_ids


class BatchesConformance(ConformanceBase):
    @bounded
    async def test_post_many_returns_the_jobs_in_order(self, board: JobBoard) -> None:
        low, urgent, plain = await board.post_many([
            NewJob("low", {"i": 0}, priority="low"), NewJob("urgent", priority="very_high"),
            NewJob("plain", {"i": 2}, key="k2")])
        assert [(job.name, dict(job.details)) for job in (low, urgent, plain)] == [
            ("low", {"i": 0}), ("urgent", {}), ("plain", {"i": 2})]
        assert await listed_ids(board) == [urgent.id, plain.id, low.id]
        assert (await board.post("plain", key="k2")).id == plain.id
        assert await board.post_many([]) == []

    @bounded
    async def test_post_many_with_dependencies_on_posted_jobs(self, board: JobBoard) -> None:
        early, late = await board.post("early"), await board.post("late")
        both, one = await board.post_many([
            NewJob("both", depends_on=[late, early.id]), NewJob("one", depends_on=[early])])
        assert (both.depends_on, one.depends_on) == ((late.id, early.id), (early.id,))
        assert [await board.state(job) for job in (both, one)] == [JobState.WAITING] * 2
        await board.consume(await board.claim(early, "w1"), {"from": "early"})
        assert [await board.state(job) for job in (both, one)] == [JobState.WAITING, JobState.UNCLAIMED]
        await board.consume(await board.claim(late, "w1"), ["late"])
        assert await board.state(both) is JobState.UNCLAIMED
        claims = [await board.claim_next("w1"), await board.claim_next("w1")]
        released = {claim.job.id: claim for claim in claims if claim is not None}
        assert sorted(released) == sorted([both.id, one.id])
        assert released[both.id].dependency_results == (["late"], {"from": "early"})
        assert released[one.id].dependency_results == ({"from": "early"},)
        assert released[both.id].job.depends_on == (late.id, early.id)

    @bounded
    async def test_a_bad_posting_in_a_batch_writes_nothing(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match=r"jobs\[1\].*priority"):
            await board.post_many([NewJob("fine"), NewJob("bad", priority="urgent-ish"), NewJob("fine")])
        with pytest.raises(InvalidJob, match=r"jobs\[0\]"):
            await board.post_many([NewJob("bad", {"when": object()})])
        assert await board.job_count() == 0

    @bounded
    async def test_a_missing_dependency_stops_a_batch_and_says_what_was_posted(self, board: JobBoard) -> None:
        parent, gone = await board.post("parent"), await board.post("gone")
        await board.consume(await board.claim(gone, "w1"))
        batch = [NewJob("a", {"i": 0}), NewJob("b", depends_on=[parent]), NewJob("c", {"i": 2}),
                 NewJob("bad", depends_on=[gone]), NewJob("after", {"i": 4})]
        with pytest.raises(DependencyMissing, match=rf"jobs\[3\]: .*{re.escape(gone.id)}.* not on the board") as raised:
            await board.post_many(batch)
        assert raised.value.index == 3
        assert [(job.name, dict(job.details)) for job in raised.value.posted] == [
            ("a", {"i": 0}), ("b", {}), ("c", {"i": 2})]
        assert sorted(await listed_ids(board)) == sorted([parent.id, *(job.id for job in raised.value.posted)])
        with pytest.raises(DependencyMissing, match=rf"{re.escape(gone.id)}.* not on the board") as alone:
            await board.post("bad", depends_on=[gone])
        assert alone.value.index is None and alone.value.posted == []

    @bounded
    async def test_consume_and_claim_next_takes_the_best_next_job(self, board: JobBoard) -> None:
        first = await board.post("a", keep_result=True)
        await board.post("other", priority="very_high")
        second = await board.post("a")
        claim = await board.claim(first, "w1")
        following = await board.consume_and_claim_next(claim, {"r": 1}, names={"a"})
        assert following is not None and following.job.id == second.id and following.owner == "w1"
        assert (await board.wait_for_completion(first)).result == {"r": 1}
        assert await board.consume_and_claim_next(following, names={"a"}) is None
        assert await board.state(second) is JobState.COMPLETE
        assert await board.job_count() == 1

    @bounded
    async def test_a_refused_consume_claims_nothing(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("a"), "w1")
        await board.post("b")
        with pytest.raises(ClaimLost):
            await board.consume_and_claim_next(dataclasses.replace(claim, generation=claim.generation + 7))
        assert await board.owner(claim.job) == "w1"
        assert await listed_ids(board, only_unclaimed=True) != []
