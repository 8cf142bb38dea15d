"""A redis:// board spread over the masters of a real Redis Cluster (``?cluster=1&partitions=K``): the
conformance suite on it, its layout (an even spread of partitions over masters, recorded once), and its
routing (docs/backends/redis.md, "Spreading one board over the shards")."""

from __future__ import annotations

import os
import uuid

import pytest
import redis

import tests.backends.redis.test_cluster as one_slot
from jobboard import NewJob, open_board
from jobboard.board.contract import JobBoard
from jobboard.errors import BoardConflict, DependencyMissing, InvalidURL, JobNotFound
from jobboard.job import JobState
from jobboard.testing._limits import FlowControlBase
from jobboard.testing.stateful import run_model_test
from jobboard_redis.cluster import key_slot
from jobboard_redis.options import parse_redis_url
from jobboard_redis.spread import SpreadBackend
from jobboard_redis.spread.layout import choose_salts, partition_root
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401

PARTITIONS = 3


class TestSpreadConformance(one_slot.TestRedisClusterConformance):
    order = "home"

    @pytest.fixture
    def board_url(self, cluster_seeds: str) -> str:  # noqa: F811
        return (f"redis://{cluster_seeds}/0/conformance-{uuid.uuid4().hex}?cluster=1&partitions={PARTITIONS}"
                f"&session_timeout=4&order={self.order}")

    unsupported = frozenset({"never_posted"})
    """Implemented (past the partition's last id), but the next id is the server's clock: not predictable."""

    claim_next_best_first = False
    """order=home takes the home partition's jobs before better ones elsewhere; a group's jobs are in the group's
    partition (jobboard_redis.spread.flow), so the flow cases take a plain job at home and a grouped one in
    either order (declared; TestExactSpreadFlow below runs them with order=exact, best first)."""

    async def inject_malformed(self, board: JobBoard) -> None:
        """A job hash written by another tool in partition 0 (its id 999999 is partition 0's)."""
        assert isinstance(board.backend, SpreadBackend)
        part = board.backend.parts[0]
        prefix = part.options.prefix
        await part.client.command("HSET", f"{prefix}job:999999", "p", b"\x93written by another tool",
                                  "name", "x", "sc", "1", "st", "u", "gen", "0", "att", "0")
        for index in ("all", "ready", "rn:x"):
            await part.client.command("ZADD", f"{prefix}{index}", "1", "999999")


@pytest.mark.skipif(not os.environ.get("JOBBOARD_SPREAD_EXACT"), reason="JOBBOARD_SPREAD_EXACT=1 runs it (20 s; "
                    "the model test below runs order=exact in every run)")
class TestExactSpreadConformance(TestSpreadConformance):
    """``order=exact``: plain posts go to every partition in turn, claims take the best head on the board
    (125 cases passed, 2026-11-27)."""

    order = "exact"
    claim_next_best_first = True


class TestExactSpreadFlow(FlowControlBase):
    """The two flow cases whose order ``order=home`` relaxes (declared above), on ``order=exact``: the best job on
    the board first, whichever partition holds it (every flow case passed there, 2026-11-27)."""

    time_limit = 20.0
    board_url = TestExactSpreadConformance.board_url
    inject_malformed = TestSpreadConformance.inject_malformed
    order = "exact"
    unsupported = TestSpreadConformance.unsupported
    test_a_sequence_runs_in_posting_order_and_continues_past_a_trashed_job = (
        one_slot.TestRedisClusterConformance.test_a_sequence_runs_in_posting_order_and_continues_past_a_trashed_job)
    test_claim_next_skips_a_full_group_for_another_groups_job = (
        one_slot.TestRedisClusterConformance.test_claim_next_skips_a_full_group_for_another_groups_job)


def _masters(seeds: str) -> dict[int, str]:
    """Slot -> the ``host:port`` of its master, from the first seed."""
    host, port = seeds.split(",")[0].split(":")
    with redis.Redis(host=host, port=int(port)) as node:
        ranges = node.execute_command("CLUSTER", "SLOTS")
    return {slot: f"{entry[2][0].decode()}:{entry[2][1]}" for entry in ranges
            for slot in range(int(entry[0]), int(entry[1]) + 1)}


def test_partitions_need_a_cluster() -> None:
    assert parse_redis_url("redis://h:1/0/b?cluster=1&partitions=6").partitions == 6
    for bad in ("redis://h:1/0/b?partitions=3", "redis://h:1/0/b?cluster=1&partitions=0",
                "redis://h:1/0/b?cluster=1&partitions=x"):
        with pytest.raises(InvalidURL):
            parse_redis_url(bad)


def test_salts_spread_the_partitions_evenly() -> None:
    """Six partitions over three masters: two each, whatever the root."""
    masters = [(0, 5460, "a:1"), (5461, 10922, "b:2"), (10923, 16383, "c:3")]
    for root in ("jobboard", "x", "orders-2026"):
        salts = choose_salts(root, 6, masters)
        served = [next(name for first, last, name in masters
                       if first <= key_slot(partition_root(root, k, 6, salt)) <= last)
                  for k, salt in enumerate(salts)]
        assert served == ["a:1", "b:2", "c:3", "a:1", "b:2", "c:3"]


@pytest.mark.timeout(60)
async def test_a_spread_board_uses_every_master_and_keeps_its_layout(cluster_seeds: str) -> None:  # noqa: F811
    """The partitions' slots are on three different masters; three boards get three homes; with
    ``order=exact`` one board's plain posts go to each partition in turn; a keyed post finds its job from any
    board; another K is refused."""
    root = f"spread-{uuid.uuid4().hex}"
    url = f"redis://{cluster_seeds}/0/{root}?cluster=1&partitions=3"
    slots = _masters(cluster_seeds)
    async with open_board(url.replace(root, f"{root}-home")) as board:  # order=home: a board's plain posts in its home partition
        assert isinstance(board.backend, SpreadBackend)
        assert len({int((await board.post("x")).id) % 3 for _ in range(3)}) == 1
    url = f"{url}&order=exact"
    async with open_board(url) as a, open_board(url) as b, open_board(url) as c:
        backends = [board.backend for board in (a, b, c)]
        assert all(isinstance(backend, SpreadBackend) for backend in backends)
        spread = [backend for backend in backends if isinstance(backend, SpreadBackend)]
        assert {backend.home for backend in spread} == {0, 1, 2}
        roots = [part.options.root for part in spread[0].parts]
        assert {slots[key_slot(root)] for root in roots} == set(slots.values())  # one partition per master
        assert roots == [part.options.root for part in spread[1].parts]
        jobs = [await a.post("x", {"n": n}) for n in range(3)]
        assert sorted(int(job.id) % 3 for job in jobs) == [0, 1, 2]
        keyed = await a.post("k", key="order-1")
        assert (await c.post("k", key="order-1")).id == keyed.id
        claimed = [await c.claim_next("w") for _ in range(4)]  # the best heads, wherever they are
        assert sorted(claim.job.id for claim in claimed if claim) == sorted([*(job.id for job in jobs), keyed.id])
        with pytest.raises(BoardConflict):
            async with open_board(url.replace("partitions=3", "partitions=4")):
                pass


@pytest.mark.timeout(60)
async def test_ids_stay_above_a_partitions_last_id_when_the_clock_is_behind_it(cluster_seeds: str) -> None:  # noqa: F811
    """A spread post's id is the server's clock, unless the partition's last id is ahead of it (a clock set
    back, a failover to a master whose clock is behind): then the ids go on above the last one, in the
    partition (id mod K), one post or many, and the last id follows them."""
    url = f"redis://{cluster_seeds}/0/ids-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as board:
        assert isinstance(board.backend, SpreadBackend)
        home = board.backend.parts[board.backend.home]
        clock = int((await board.post("x")).id)  # about the clock, in the home partition
        ahead = clock + 10**12 + 7  # 11.6 days ahead, not in the partition's residue
        await home.client.command("SET", f"{home.options.prefix}seq", str(ahead))
        one = int((await board.post("x")).id)
        many = [int(job.id) for job in await board.post_many([NewJob("x")] * 3)]
        ids = [one, *many]
        assert ids == sorted(ids) and len(set(ids)) == 4 and ahead < one <= ahead + 3
        assert {job_id % 3 for job_id in ids} == {board.backend.home}
        assert int(await home.client.command("GET", f"{home.options.prefix}seq")) == ids[-1]
        await home.client.command("SET", f"{home.options.prefix}seq", "5")  # behind the clock: the clock again
        assert clock < int((await board.post("x")).id) < ahead


@pytest.mark.timeout(60)
async def test_claim_many_takes_home_first_then_steals_and_releases_uncounted(cluster_seeds: str) -> None:  # noqa: F811
    """``order=home``: ``claim_many`` takes the home partition's jobs (one call), then the others' best heads; a
    claim given back (``release``) goes back in its own partition with its attempt uncounted."""
    url = f"redis://{cluster_seeds}/0/many-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as a, open_board(url) as b:
        assert isinstance(a.backend, SpreadBackend) and isinstance(b.backend, SpreadBackend)
        assert a.backend.home != b.backend.home and a.releases_uncounted and a.claims_many_at_once
        mine = [(await a.post("x", max_attempts=1)).id for _ in range(2)]
        theirs = [(await b.post("x", max_attempts=1)).id for _ in range(3)]
        claims = await a.claim_many("w", 4)
        assert [claim.job.id for claim in claims] == [*mine, *theirs[:2]]  # home's, then the oldest elsewhere
        home, stolen = claims[:2], claims[2:]
        for claim in (home[1], stolen[0]):
            await a.release(claim)
        assert [(await a.get(job)).attempts for job in (mine[1], theirs[0])] == [0, 0]
        again = await b.claim_many("w2", 5)  # b's home: its two left (one given back), then a's given back
        assert [claim.job.id for claim in again] == [theirs[0], theirs[2], mine[1]]
        for claim in [home[0], stolen[1], *again]:
            await a.consume(claim)
        assert await a.job_count() == 0


@pytest.mark.timeout(60)
async def test_links_across_partitions(cluster_seeds: str) -> None:  # noqa: F811
    """A dependency in another partition delivers its result, or its trash, to its dependent there; one gone
    before the link undoes the post (DependencyMissing, nothing left on the board)."""
    url = f"redis://{cluster_seeds}/0/links-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as a, open_board(url) as b:
        first, second = await a.post("a"), await b.post("b")
        assert int(first.id) % 3 != int(second.id) % 3
        both = await a.post("both", depends_on=[second, first])
        doomed = await b.post("doomed", depends_on=[first, second])
        await a.consume(await a.claim(first.id, "w"), 1)
        assert await b.state(both.id) is JobState.WAITING
        await b.consume(await b.claim(second.id, "w"), 2)
        claim = await b.claim(both.id, "w")
        assert claim.dependency_results == (2, 1)
        assert await a.state(doomed.id) is JobState.UNCLAIMED  # its two dependencies, from two partitions
        other = await b.post("other")
        victim = await a.post("victim", depends_on=[other])
        await a.cancel(other.id, "no")
        assert [item.job.id for item in [t async for t in a.backend.trashed()]][-1:] == [victim.id]
        gone = await b.post("gone")
        await b.consume(await b.claim(gone.id, "w"), 0)
        with pytest.raises(DependencyMissing):
            await a.post("late", depends_on=[doomed, gone])  # posted with doomed, then undone
        assert sorted(job.id for job in [j async for j in a.iterjobs()]) == sorted([both.id, doomed.id])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("order", ["home", "exact"])
def test_a_spread_board_follows_the_model(cluster_seeds: str, order: str) -> None:  # noqa: F811
    """The model-based test of the contract (as on one slot) on a board spread over three partitions; with the
    default ``order=home`` any claimable job is a right claim (a board takes its home partition's first, as
    the partitioned zookeeper:// board does), with ``order=exact`` only the board's best."""
    run_model_test(lambda: f"redis://{cluster_seeds}/0/model-{uuid.uuid4().hex}?cluster=1&partitions=3"
                           f"&session_timeout=4&order={order}", examples=8, claim_next_best_first=order == "exact")


@pytest.mark.timeout(60)
async def test_a_dependent_whose_poster_died_before_linking_it_is_linked_or_undone_by_a_sweep(
        cluster_seeds: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Posted in its partition but not linked to its dependency elsewhere (its poster died between the two
    calls): a sweep links it, and it runs once both dependencies are consumed; one whose dependency elsewhere
    was consumed meanwhile is removed by the sweep."""
    url = f"redis://{cluster_seeds}/0/sweep-{uuid.uuid4().hex}?cluster=1&partitions=3"
    async with open_board(url) as a, open_board(url) as b:
        assert isinstance(a.backend, SpreadBackend)
        spread = a.backend

        async def dies_before_linking(*args: object) -> None:
            return None

        posted = []
        for name in ("linked-late", "undone"):
            dep, other = await a.post(f"{name}-dep"), await b.post(f"{name}-other")
            assert spread.part_of(dep.id) is not spread.part_of(other.id)
            with monkeypatch.context() as patch:
                patch.setattr(spread.links, "link", dies_before_linking)
                posted.append((await a.post(name, depends_on=[dep, other]), dep, other))
        (late, late_dep, late_other), (undone, _, undone_other) = posted
        await b.consume(await b.claim(undone_other.id, "w"), 0)  # gone before any link
        part = spread.part_of(late.id)
        assert part is spread.part_of(undone.id)
        assert await spread.links.relink(part, 0) == 2
        assert await spread.links.relink(part, 0) == 0
        with pytest.raises(JobNotFound):
            await a.get(undone.id)
        for dep, result in ((late_dep, 1), (late_other, 2)):
            await a.consume(await a.claim(dep.id, "w"), result)
        assert (await a.claim(late.id, "w")).dependency_results == (1, 2)
