"""The mutants of a redis:// board spread over a Redis Cluster (``?cluster=1&partitions=3``; issue 28): each breaks
one guarantee in the spread board's own code (``jobboard_redis/spread/``) or the partition calls it relies on
(``jobboard_redis/board.py``), and the conformance suite, unchanged, runs against the broken copy on a real
3-master cluster (``python -m tests.support.rediscluster run -- bash scripts/mutate --target spread``).

Anchors are exact text; when the code moves, ``bash scripts/mutate --target spread --check`` names the mutants to
update. The scripts (``.lua``) are not mutated here: the copy's check compiles a mutated file as Python.
"""

from __future__ import annotations

from tests.mutation.mutating import Mutant

SPREAD = "backends/redis/jobboard_redis/spread/backend.py"
CLAIMS = "backends/redis/jobboard_redis/spread/claims.py"
LINKS = "backends/redis/jobboard_redis/spread/links.py"
PARTITION = "backends/redis/jobboard_redis/board.py"
"""A partition's calls (the one-slot board's code, which each partition is)."""

SPREAD_SANITY = Mutant(
    "spread-sanity-job-count-off-by-one", "job_count counts the jobs of every partition (proves the mutated copy "
    "is what ran)", SPREAD,
    "return sum(await self._each([part.job_count() for part in self.parts]))",
    "return sum(await self._each([part.job_count() for part in self.parts])) + 1",
)

CLAIMING = [
    Mutant("home-never-steals", "claim_next claims a claimable job wherever it is (home empty: another partition's)",
           CLAIMS, "        return await self.steal.claim_next(owner, names)\n\n    async def claim_many",
           "        return None\n\n    async def claim_many"),
    Mutant("fused-claim-never-steals", "consume_and_claim_next claims the next claimable job wherever it is",
           CLAIMS, "        return await self.claim_next(claim.owner, names, skip=part)", "        return None"),
    Mutant("claim-many-steals-only-when-home-is-empty", "claim_many claims up to count jobs while the board has "
           "them", CLAIMS, "while len(claims) < count and", "while not claims and len(claims) < count and"),
    Mutant("exact-takes-the-worst-head", "order=exact: priority, then age, across the board", CLAIMS,
           "return self.parts[min(found)[1]] if found else None", "return self.parts[max(found)[1]] if found else None"),
    Mutant("claim-by-id-in-partition-0", "claim(job_id) claims that job, in whichever partition it is", SPREAD,
           "return await self.part_of(job_id).claim(job_id, owner)", "return await self.parts[0].claim(job_id, owner)"),
    Mutant("claim-lost-by-owner-only", "a claim held ahead is lost once its job was claimed again, even under the "
           "same owner", SPREAD, "return await self.part_of(claim.job.id).claim_lost(claim)",
           "return await super().claim_lost(claim)"),
    Mutant("cancelled-claim-kept", "a claim whose caller gave up before the reply goes back (no job is left "
           "claimed by nobody)", PARTITION, "                self._spawn(self._unclaim(*claim))",
           "                pass"),
]

READING = [
    Mutant("listing-merged-by-age-only", "listings are in priority, then age, order across the partitions", SPREAD,
           "key=lambda item: (item.job.priority.rank, item.job.sequence)", "key=lambda item: (item.job.sequence,)"),
    Mutant("trash-listed-unsorted", "trashed() lists the trash oldest first across the partitions", SPREAD,
           "sorted((item for items in lists for item in items), key=lambda item: item.trashed_at)",
           "[item for items in lists for item in items]"),
    Mutant("wait-needs-every-partition", "wait() returns when any partition has a claimable job", SPREAD,
           "return_when=asyncio.FIRST_COMPLETED", "return_when=asyncio.ALL_COMPLETED"),
]

LINKING = [
    Mutant("outbox-not-forwarded", "a settle reaches the dependents in other partitions before it returns",
           PARTITION, "                await self.forward(self)", "                pass"),
    Mutant("delivered-as-trash", "a consumed dependency delivers its result to a dependent in another partition "
           "(it does not trash it)", LINKS, 'if kind == b"deliver":', 'if kind == b"trash":'),
]

SPREAD_MUTANTS: list[Mutant] = [SPREAD_SANITY, *CLAIMING, *READING, *LINKING]
SPREAD_SUITE = ["tests/backends/redis/test_spread.py::TestSpreadConformance",
                "tests/backends/redis/test_spread.py::TestExactSpreadConformance"]
"""The conformance suite on ``order=home`` and ``order=exact`` (``JOBBOARD_SPREAD_EXACT=1``, set by the run)."""
