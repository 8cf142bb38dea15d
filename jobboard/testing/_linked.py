"""Conformance: linked jobs (dependencies, results, trash cascades)."""

from __future__ import annotations

import pytest

from jobboard.board.contract import JobBoard
from jobboard.errors import InvalidJob, NotClaimable
from jobboard.job import JobState
from jobboard.testing._base import ConformanceBase, bounded, listed_ids


class LinkedConformance(ConformanceBase):
    @bounded
    async def test_linked_job_waits_for_its_dependencies(self, board: JobBoard) -> None:
        first = await board.post("first")
        linked = await board.post("linked", depends_on=[first])
        assert linked.depends_on == (first.id,)
        assert await board.state(linked) is JobState.WAITING
        assert await listed_ids(board, only_unclaimed=True) == [first.id]
        assert set(await listed_ids(board)) == {first.id, linked.id}
        with pytest.raises(NotClaimable):
            await board.claim(linked, "w1")

    @bounded
    async def test_released_with_results_in_depends_on_order(self, board: JobBoard) -> None:
        a, b, c = [await board.post(name) for name in "abc"]
        linked = await board.post("sum", depends_on=[c, a, b.id])
        for job, result in ((a, 1), (b, {"two": 2}), (c, [3])):
            assert await board.state(linked) is JobState.WAITING
            await board.consume(await board.claim(job, "w1"), result)
        assert await board.state(linked) is JobState.UNCLAIMED
        released = await board.claim_next("w1")
        assert released is not None and released.job.id == linked.id
        assert released.dependency_results == ([3], 1, {"two": 2})

    @bounded
    async def test_dependent_posted_after_the_claim_gets_the_result(self, board: JobBoard) -> None:
        claim = await board.claim(await board.post("dep"), "w1")
        late = await board.post("late", depends_on=[claim.job])
        await board.consume(claim, {"value": 7})
        released = await board.claim_next("w1")
        assert released is not None and released.job.id == late.id
        assert released.dependency_results == ({"value": 7},)

    @bounded
    async def test_chain_releases_step_by_step(self, board: JobBoard) -> None:
        step = await board.post("s0")
        chain = [step]
        for index in range(1, 4):
            chain.append(await board.post(f"s{index}", depends_on=[chain[-1]]))
        seen = []
        while (claim := await board.claim_next("w1")) is not None:
            seen.append((claim.job.name, claim.dependency_results))
            await board.consume(claim, len(seen))
        assert seen == [("s0", ()), ("s1", (1,)), ("s2", (2,)), ("s3", (3,))]

    @bounded
    async def test_abandoned_dependency_keeps_dependents_waiting(self, board: JobBoard) -> None:
        dep = await board.post("dep")
        linked = await board.post("linked", depends_on=[dep])
        await board.abandon(await board.claim(dep, "w1"))
        assert await board.state(linked) is JobState.WAITING

    @bounded
    async def test_trash_cascades_to_dependents(self, board: JobBoard) -> None:
        root = await board.post("root")
        other = await board.post("other")
        child = await board.post("child", depends_on=[root, other])
        grandchild = await board.post("grandchild", depends_on=[child])
        await board.trash(await board.claim(root, "w1"), "broken input")
        assert await board.state(child) is JobState.TRASHED
        assert await board.state(grandchild) is JobState.TRASHED
        assert await board.state(other) is JobState.UNCLAIMED
        reasons = {t.job.id: t.reason async for t in board.trashed()}
        assert f"dependency {root.id} (root) was trashed: broken input" in reasons[child.id]
        assert f"dependency {child.id} (child) was trashed: " in reasons[grandchild.id]
        await board.consume(await board.claim(other, "w1"), "fine")
        assert await board.job_count() == 0

    @bounded
    async def test_exhausted_dependency_cascades_too(self, board: JobBoard) -> None:
        dep = await board.post("dep", max_attempts=1)
        linked = await board.post("linked", depends_on=[dep])
        await board.abandon(await board.claim(dep, "w1"))
        assert await board.claim_next("w1") is None
        assert await board.state(linked) is JobState.TRASHED

    @bounded
    async def test_unknown_dependency_writes_nothing(self, board: JobBoard) -> None:
        with pytest.raises(InvalidJob, match="job-that-does-not-exist"):
            await board.post("linked", depends_on=["job-that-does-not-exist"])
        assert await board.job_count() == 0

    @bounded
    async def test_duplicate_dependency_refused(self, board: JobBoard) -> None:
        dep = await board.post("dep")
        with pytest.raises(InvalidJob, match="twice"):
            await board.post("linked", depends_on=[dep, dep.id])
        assert await board.job_count() == 1
