"""Review 2 of the spread redis:// board's pause order (d93e6f7; fixed: the partitions' applied ``pzv`` read
first, then one script in partition 0 raising ``pzo`` to their maximum and incrementing it) and a partition
ignores an order not newer than the name's last applied there. Two calls must never share an order: with
equal orders each partition keeps whichever call reached it first, and the partitions disagree for good."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from jobboard import open_board
from jobboard.errors import BackendUnavailable
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401
from tests.backends.redis.test_spread_flow import backend, spread_url, three_boards_holding_x

pytestmark = pytest.mark.timeout(60)


async def test_three_racing_calls_never_share_an_order(cluster_seeds: str) -> None:  # noqa: F811
    """a's pause takes its increment (1), then reads the partitions' pzv late (a slow reply); b's resume runs
    whole meanwhile (order 2); c's resume takes 3 and is slow reaching partition 1. a reads pzv=2 and takes
    max(1, 2+1) = 3: c's order. a then writes every partition; c's write lands where a's had not yet. Every
    call returned: each partition must agree with ``paused()`` (no failover, no lost write)."""
    with anyio.fail_after(30):
        url = spread_url(cluster_seeds)
        async with three_boards_holding_x(url) as boards:
            a, b, c = boards
            zero_a, two_a = backend(a).parts[0], backend(a).parts[2]
            one_c, two_c = backend(c).parts[1], backend(c).parts[2]
            read_a, slow_c, a_done = anyio.Event(), anyio.Event(), anyio.Event()
            a_counted, c_at_one, c_at_two = anyio.Event(), anyio.Event(), anyio.Event()
            command, pause_two = zero_a.client.command, two_a.pause
            resume_one, resume_two = one_c.resume, two_c.resume

            async def late_read(*args: Any, **kwargs: Any) -> Any:  # a's HGET of pzv in partition 0 waits
                if args[:1] == ("HGET",) and str(args[1]).endswith("pzv"):
                    a_counted.set()
                    await read_a.wait()
                return await command(*args, **kwargs)

            async def slow_resume(name: str | None, order: int | None = None) -> None:  # c at partition 1
                c_at_one.set()
                await slow_c.wait()
                await resume_one(name, order)

            async def written_two(name: str | None, order: int | None = None) -> None:  # c at partition 2
                await resume_two(name, order)
                c_at_two.set()

            async def a_pause_two(name: str | None, order: int | None = None) -> None:  # a after c at 2
                await c_at_two.wait()
                await pause_two(name, order)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(zero_a.client, "command", late_read)
                patch.setattr(one_c, "resume", slow_resume)
                patch.setattr(two_a, "pause", a_pause_two)
                patch.setattr(two_c, "resume", written_two)
                async with anyio.create_task_group() as group:
                    async def pause_a() -> None:
                        await a.pause("x")
                        a_done.set()
                    group.start_soon(pause_a)
                    with anyio.move_on_after(10):  # a fix that reads no pzv here: nothing to stage
                        await a_counted.wait()
                    if not a_counted.is_set():
                        read_a.set()
                    await b.resume("x")           # whole: order 2 everywhere
                    group.start_soon(c.resume, "x")
                    await c_at_one.wait()         # c took order 3 and is writing partitions 1 and 2
                    read_a.set()                  # a reads partition 0's pzv (2): order max(1, 3) = 3
                    await a_done.wait()
                    slow_c.set()
            states = [frozenset((await part.paused()).names) for part in backend(a).parts]
            shown = (await c.paused()).names
            claimed = [claim for board in boards if (claim := await board.claim_next("w")) is not None]
            assert len(set(states)) == 1, f"partitions disagree: {states}, paused() shows {set(shown)}"
            assert len(claimed) == (0 if shown else len(boards))


async def test_a_resume_cancelled_half_way_is_not_hidden_behind_paused(cluster_seeds: str) -> None:  # noqa: F811
    """x paused everywhere; a resume is cancelled once partitions 1 and 2 are written, partition 0's write
    still on its way: the fan-out is shielded, so the resume ends in every partition. Then a pause dies at
    partition 0 (partitions 1 and 2 hold it): ``paused()`` never hides a partition's pause, so it shows x
    (SpreadFlow's documented guarantee; the operator repeats the call)."""
    with anyio.fail_after(30):
        url = spread_url(cluster_seeds)
        async with three_boards_holding_x(url) as boards:
            a, b, c = boards
            await a.pause("x")
            zero = backend(b).parts[0]
            reached, cancelled = anyio.Event(), anyio.Event()
            resume_zero = zero.resume

            async def slow(name: str | None, order: int | None = None) -> None:  # reached when 1, 2 are written
                reached.set()
                await cancelled.wait()
                await resume_zero(name, order)

            async def dead(name: str | None, order: int | None = None) -> None:  # the caller died here
                raise BackendUnavailable("redis: the pausing process died (simulated)")

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(zero, "resume", slow)
                async with anyio.create_task_group() as group:
                    group.start_soon(b.resume, "x")
                    await reached.wait()
                    group.cancel_scope.cancel()
                    cancelled.set()
            states = [frozenset((await part.paused()).names) for part in backend(a).parts]
            assert states == [frozenset()] * 3, f"the cancelled resume stopped half-way: {states}"
            assert (await c.paused()).names == frozenset()
            claimed = [claim for board in boards if (claim := await board.claim_next("w")) is not None]
            assert len(claimed) == len(boards)
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(zero, "pause", dead)
                with pytest.raises(BackendUnavailable):
                    await b.pause("x")
            states = [frozenset((await part.paused()).names) for part in backend(a).parts]
            assert states == [frozenset(), {"x"}, {"x"}]
            assert (await c.paused()).names == {"x"}, "paused() hides the pause partitions 1 and 2 hold"


async def test_a_home_board_steals_from_a_reachable_partition_while_another_is_down(
        cluster_seeds: str) -> None:  # noqa: F811
    """A worker (home 0, empty) and a producer (home 1) with one job at home; partition 2's master is down (its
    calls from the worker raise BackendUnavailable, as a master failing over does for seconds): the worker's
    claim_next takes the job in partition 1."""
    with anyio.fail_after(30):
        url = spread_url(cluster_seeds)
        async with open_board(url) as worker, open_board(url) as producer:
            assert (backend(worker).home, backend(producer).home) == (0, 1)
            job = await producer.post("x")
            down = backend(worker).parts[2]

            async def unreachable(*args: Any, **kwargs: Any) -> Any:
                raise BackendUnavailable("redis: partition 2's master is down (simulated)")

            with pytest.MonkeyPatch.context() as patch:
                for call in ("pipeline", "command"):
                    patch.setattr(down.client, call, unreachable)
                patch.setattr(down, "claim_next", unreachable)
                claim = await worker.claim_next("w")
            assert claim is not None and claim.job.id == job.id
