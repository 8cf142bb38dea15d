"""postgresql:// flow control, an independent review (issue 27): each bug found is a test marked
``xfail(strict=True)`` naming it; the others check a guarantee that holds."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import anyio
import asyncpg
import pytest

from jobboard import NewJob, open_board
from jobboard.errors import HeldBack
from jobboard.job import Claim, JobState
from tests.support.flow_review import (
    exhausted_at_claim_takes_no_grant,
    held_back_exhausted_job,
    sequence_in_posting_order,
)
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def url(postgresql_url: str) -> str:  # noqa: F811
    return f"{postgresql_url}?board=review-{uuid.uuid4().hex}&reap_interval=0.2"


async def test_a_claim_that_waited_for_a_row_lock_counts_in_its_rate_window_from_its_grant(url: str) -> None:
    period = 2.0
    with anyio.fail_after(30):
        async with open_board(url) as board, open_board(url) as worker:
            await board.set_limit("g", rate=(1, period))
            first, second = await board.post("w", group="g"), await board.post("w", group="g")
            connection: asyncpg.Connection = await asyncpg.connect(url.split("?")[0])
            try:
                async with anyio.create_task_group() as tasks:
                    async with connection.transaction():  # the application posts a dependent of `first` in its
                        await board.post("after", depends_on=[first], connection=connection)  # own transaction
                        tasks.start_soon(worker.claim, first, "w1")  # waits for first's row until that commits
                        await anyio.sleep(period + 0.5)
                    released = time.monotonic()  # the claim of `first` is granted after this moment
            finally:
                await connection.close()
            try:
                await worker.claim(second, "w2")
            except HeldBack as held:
                assert held.why == "rate"
            else:  # granted: two claims of a 1-per-period group within less than a period
                pytest.fail(f"two grants {time.monotonic() - released:.2f} s apart with a rate of 1 per {period} s")


async def test_claim_of_a_paused_job_with_its_attempts_used_up_is_held_back_not_trashed(url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await board.post("w", max_attempts=1)
            claim = await board.claim(job, "w1")
            await board.abandon(claim)
            await board.pause("w")
            with pytest.raises(HeldBack) as held:
                await board.claim(job, "w2")
            assert held.value.why == "paused"
            assert await board.state(job) is JobState.UNCLAIMED


async def test_claim_of_a_later_job_of_a_sequence_with_its_attempts_used_up_is_held_back(url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await board.set_limit("s", sequence=True)
            head, later = await board.post("w", group="s"), await board.post("w", group="s", max_attempts=1)
            claim = await board.claim(head, "w1")
            await board.trash(claim, "bad")  # a trashed job does not stop the sequence
            claim = await board.claim(later, "w1")
            await board.abandon(claim)  # its one attempt used
            await board.requeue(head.id)  # back at its place: the head again
            with pytest.raises(HeldBack) as held:
                await board.claim(later, "w2")
            assert held.value.why == "sequence"
            assert await board.state(later) is JobState.UNCLAIMED


async def test_a_pause_racing_the_last_limit_cleared_is_never_ignored(url: str) -> None:
    board_name = url.split("board=")[1].split("&")[0]
    with anyio.fail_after(55):
        async with open_board(url) as board, open_board(url) as other:
            connection: asyncpg.Connection = await asyncpg.connect(url.split("?")[0])
            try:
                await board.post("x")
                for _ in range(400):  # before edf2351 the race was lost within ~50-800 rounds (5 ms each)
                    await board.resume("x")
                    await board.set_limit("g", concurrency=1)
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(board.clear_limit, "g")
                        tasks.start_soon(other.pause, "x")
                    gates = await connection.fetchval("SELECT gates FROM jobboard.flow WHERE board = $1", board_name)
                    if gates == 0:
                        break
                assert (await board.paused()).names == {"x"}
                claim = await board.claim_next("w0")
                assert claim is None, f"a job of the paused name 'x' was claimed (gates = {gates})"
            finally:
                await connection.close()


async def test_one_coalesced_cycle_counts_each_requests_permit_and_grant(url: str) -> None:
    """Concurrent claim_next calls of one board share a jb.cycle: a concurrency of 2 and a rate of 3 per minute
    are counted request by request inside it."""
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await board.set_limit("c", concurrency=2)
            await board.set_limit("r", rate=(3, 60.0))
            await board.post_many([NewJob("w", group=group) for group in ("c", "r") for _ in range(8)]
                                  + [NewJob("w") for _ in range(4)])
            claims: list[Claim | None] = []

            async def claimer(index: int) -> None:
                claims.append(await board.claim_next(f"w{index}"))

            async with anyio.create_task_group() as tasks:
                for index in range(16):
                    tasks.start_soon(claimer, index)
            groups = sorted(str(claim.job.group) for claim in claims if claim is not None)
            assert groups == ["None"] * 4 + ["c"] * 2 + ["r"] * 3
            [c, r] = await board.limits()
            assert (c.running, c.waiting, r.running, r.waiting) == (2, 6, 3, 5)


async def test_a_limit_lowered_below_running_revokes_nothing_and_grants_nothing_until_under(url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board, open_board(url) as other:
            await board.set_limit("g", concurrency=3)
            await board.post_many([NewJob("w", group="g") for _ in range(5)])
            held = [await board.claim_next("w") for _ in range(3)]
            await other.set_limit("g", concurrency=1)
            for claim in held[:2]:
                assert claim is not None and await other.claim_next("w") is None
                await board.consume(claim)  # still 2, then 1 running: at the limit
            assert await other.claim_next("w") is None
            assert held[2] is not None
            await board.consume(held[2])
            assert await other.claim_next("w") is not None


async def test_a_resume_or_a_permit_returned_wakes_a_waiter_of_another_board(url: str) -> None:
    """idle_poll=30: the waiter returns by the wake-up, not by its fallback look."""
    with anyio.fail_after(30):
        async with open_board(url) as board, open_board(f"{url}&idle_poll=30") as waiter:
            await board.pause("p")
            await board.post("p")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(board_later, board.resume("p"))
                with anyio.fail_after(5):
                    assert [job.name for job in await waiter.wait(names=["p"])] == ["p"]
                tasks.cancel_scope.cancel()
            await board.set_limit("g", concurrency=1)
            await board.post("g", group="g")
            holder = await board.claim_next("o", names=["p"])  # the resumed job (not grouped)
            claim = await board.claim_next("o", names=["g"])
            assert holder is not None and claim is not None
            await board.post("g", group="g")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(board_later, board.consume(claim))
                with anyio.fail_after(5):
                    assert [job.name for job in await waiter.wait(names=["g"])] == ["g"]
                tasks.cancel_scope.cancel()


async def board_later(call: Awaitable[object]) -> None:
    """``call`` awaited after 0.3 s (the other side waits by then)."""
    await anyio.sleep(0.3)
    await call


@pytest.mark.parametrize("case", [
    "paused",
    "sequence",
    "concurrency",
])
async def test_claim_next_trashes_no_held_back_job_whose_attempts_are_used_up(url: str, case: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board:
            job = await held_back_exhausted_job(board, case)
            assert await board.claim_next("o2") is None
            assert await board.state(job) is JobState.UNCLAIMED


async def test_a_sequence_runs_in_posting_order_past_priorities_delays_and_abandons(url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await sequence_in_posting_order(board)


async def test_a_job_trashed_at_claim_for_its_attempts_takes_no_permit_nor_rate_grant(url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(url) as board:
            await exhausted_at_claim_takes_no_grant(board)


def early_version_15_ddl(schema: str) -> str:
    """The DDL of schema version 15 as first shipped (1691e51, before the review's fixes), from git."""
    base = "backends/postgresql/jobboard_postgresql"
    found: dict[str, object] = {}
    for name in ("functions", "settles", "flow_sql", "schema"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"1691e51:{base}/{name}.py"], capture_output=True,
                              text=True, check=True).stdout
        exec(text.replace("from jobboard_postgresql.", "# "), found)  # noqa: S102 - the project's own history
    assert found["VERSION"] == 15
    ddl = found["ddl"]
    assert callable(ddl)
    return str(ddl(schema))


async def test_a_schema_made_by_an_earlier_version_15_build_gets_the_current_functions(
        postgresql_url: str) -> None:  # noqa: F811
    try:
        old = early_version_15_ddl(schema := f"flow_v15_{uuid.uuid4().hex[:8]}")
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        pytest.skip(f"no git history here: {error}")
    connection = await asyncpg.connect(postgresql_url)
    try:
        await connection.execute(old)
        async with open_board(f"{postgresql_url}?board=b&schema={schema}") as board:
            await board.set_limit("g", rate=(2, 1.0))
            await board.post("w", group="g")
            assert await board.claim_next("o") is not None
        source = await connection.fetchval("SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = "
                                           "p.pronamespace WHERE n.nspname = $1 AND p.proname = 'flow_check'", schema)
        assert "statement_timestamp" not in source  # the rate grant at the server's clock, under the lock
    finally:
        await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await connection.close()
