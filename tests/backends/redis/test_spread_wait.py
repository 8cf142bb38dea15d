"""A spread board's ``wait`` cancelled by its caller's cancel scope as it answers (real Redis Cluster).

``wait`` waits on every partition at once and, once one answers, cancels the others and waits for them to end.
A caller's ``anyio.move_on_after`` whose deadline fell in that last step got the cancelled partitions'
``CancelledError`` (no cancel scope's message) instead of its own: the scope did not take it as its own and let
it out, so the caller's task ended as cancelled. In an anyio task group that cancels every other task and the
group exits without an error: the failover and slot-migration tests under load (test_cluster_failover.py, whose
claimers wait under ``move_on_after(0.2)``) ended their load early, once without its failovers, once before a
post acknowledged last was consumed (reported lost).
"""

from __future__ import annotations

import asyncio
import uuid

import anyio
import pytest

from jobboard import open_board
from tests.backends.redis.test_cluster import cluster_seeds  # noqa: F401

pytestmark = pytest.mark.timeout(60)
ROUNDS = 12
ITERATIONS = 60
"""Each round cancels a ``wait`` after 0, 1, ... ITERATIONS - 1 loop iterations: whatever the round trips take,
some cancellations land as the answer comes back."""


async def cancelled_after(scope: anyio.CancelScope, iterations: int) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)
    scope.cancel()


async def test_a_wait_cancelled_as_it_answers_ends_in_its_scope(cluster_seeds: str) -> None:  # noqa: F811
    url = f"redis://{cluster_seeds}/0/wait-{uuid.uuid4().hex}?cluster=1&partitions=3"
    escaped, answered, cancelled = [], 0, 0
    with anyio.fail_after(45):
        async with open_board(url) as board:
            await board.post("ready")  # every wait answers at once: the cancellation races its answer
            for _ in range(ROUNDS):
                for iterations in range(ITERATIONS):
                    scope = anyio.CancelScope()
                    canceller = asyncio.ensure_future(cancelled_after(scope, iterations))
                    try:
                        with scope:
                            await board.wait()
                            answered += 1
                    except asyncio.CancelledError as error:  # not the scope's: it would have ended the task
                        escaped.append((iterations, repr(error)))
                        task = asyncio.current_task()
                        assert task is not None
                        while task.cancelling():
                            task.uncancel()
                    cancelled += scope.cancelled_caught
                    await canceller
    print(f"{answered} waits answered, {cancelled} cancelled in their scope, {len(escaped)} escaped it")
    assert escaped == [], f"{len(escaped)} of {ROUNDS * ITERATIONS} cancellations left their scope: {escaped[:5]}"
    assert answered and cancelled  # both outcomes were raced
