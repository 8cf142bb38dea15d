"""redis:// through Sentinel, across several failovers in a row, under load, with both durabilities.

A seeded schedule (``FAILOVER_SEED`` replays one; the seed is printed) of three failovers: a graceful
``SENTINEL FAILOVER`` and a SIGKILL of the primary restarted as the new primary's replica, in the
seed's order, then a SIGKILL that leaves the last primary without a replica. One board posts keyed
jobs throughout (a post that raises a transient error is posted again with its key), four claimers on
a second board claim and consume (a settle is retried on ``BackendUnavailable``). Each client records
what it was told: the posts acknowledged, the consumes that returned.

- ``durability=strict``: 0 acknowledged posts lost, 0 consumes reported twice.
- default durability: what was lost or run twice is counted and printed (docs/backends/redis.md).
- every run: both boards still post, claim and consume at the end, within seconds.

A failed run says, for each index it names, what the clients were told about it (``History.told``).

And one failover that the schedule meets only by chance, made to happen: a strict board that last saw
its primary without a replica, and that replica promoted before the board writes again.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from jobboard import JobBoard, open_board
from jobboard.errors import BackendUnavailable, ClaimLost, UnknownOutcome
from tests.support.failover import SentinelGroup

pytestmark = pytest.mark.timeout(240)
CLAIMERS = 4
POST_EVERY = 0.01
SERVING_WITHIN = 15.0


@dataclass
class History:
    """What the clients were told."""

    acknowledged: list[int] = field(default_factory=list)
    """The index of each post acknowledged (job ids may be given again after a failover that lost writes)."""
    consumed: list[int] = field(default_factory=list)
    retried_posts: int = 0
    lost_claims: int = 0
    told: dict[int, list[str]] = field(default_factory=dict)
    """Per index: what each post and consume of it was told, in order (for a failed run's message)."""

    def tell(self, index: int, what: str) -> None:
        self.told.setdefault(index, []).append(f"{time.monotonic():.2f} {what}")

    def stories(self, indexes: list[int]) -> str:
        return "; ".join(f"{index}: {self.told.get(index, [])}" for index in indexes[:5])

    def tally(self, what: str, extra: str = "") -> tuple[list[int], list[int]]:
        """The acknowledged posts never consumed and those consumed more than once, printed with ``what``."""
        ran = Counter(self.consumed)
        lost = sorted(set(self.acknowledged) - set(ran))
        twice = sorted(index for index, count in ran.items() if count > 1)
        print(f"{what}: {len(self.acknowledged)} posts acknowledged ({self.retried_posts} post attempts retried), "
              f"{len(ran)} consumed, {len(lost)} lost, {len(twice)} consumed twice, {self.lost_claims} claims lost"
              f"{extra}")
        return lost, twice


def schedule(seed: int) -> list[tuple[float, str]]:
    """(seconds of load before it, failover) × 3: the seed orders the first two and draws the pauses (from 0:
    a failover right after the last one ended, before the boards have looked again at the new replica)."""
    rng = random.Random(seed)
    first_two = ["graceful", "kill-restart"]
    rng.shuffle(first_two)
    return [(rng.uniform(0.0, 1.5), step) for step in [*first_two, "kill-last"]]


def perform(group: SentinelGroup, step: str) -> None:
    if step == "graceful":
        group.graceful_failover()
    else:
        group.kill_primary(restart_as_replica=step == "kill-restart")


async def post_until(board: JobBoard, stop: anyio.Event, history: History, done: anyio.Event) -> None:
    """Post until ``stop``; ``done`` once the last post returned (so the drain counts every post)."""
    try:
        await _post_until(board, stop, history)
    finally:
        done.set()


async def _post_until(board: JobBoard, stop: anyio.Event, history: History) -> None:
    index = 0
    while not stop.is_set():
        try:
            job = await board.post("j", {"i": index}, key=f"k{index}")
        except (BackendUnavailable, UnknownOutcome) as error:  # posted again with its key
            history.tell(index, f"post raised {type(error).__name__}")
            history.retried_posts += 1
            await anyio.sleep(0.05)
            continue
        history.acknowledged.append(index)
        history.tell(index, f"posted as job {job.id}")
        index += 1
        await anyio.sleep(POST_EVERY)


async def claim_and_consume(board: JobBoard, stop: anyio.Event, history: History) -> None:
    while not stop.is_set():
        try:
            claim = await board.claim_next("w")
        except BackendUnavailable:
            await anyio.sleep(0.05)
            continue
        if claim is None:
            with anyio.move_on_after(0.2):
                await board.wait()
            continue
        index, which = claim.job.details["i"], f"job {claim.job.id} generation {claim.generation}"
        while True:
            try:
                await board.consume(claim, "done")
            except BackendUnavailable:
                history.tell(index, f"consume of {which} raised BackendUnavailable")
                await anyio.sleep(0.05)
                continue
            except ClaimLost:  # released with its session: another claimer runs it
                history.tell(index, f"consume of {which}: ClaimLost")
                history.lost_claims += 1
                break
            history.tell(index, f"consumed {which}")
            history.consumed.append(index)
            break


async def drain(history: History, board: JobBoard, within: float, *, losses_expected: bool) -> None:
    """Until every acknowledged post was consumed once, or ``within`` seconds. With ``losses_expected`` (the
    default durability), also once ``board`` holds no job (claimed ones included: the posts not consumed by then
    were lost in a failover, and nothing is left to consume). Under ``strict`` a post not consumed is a failure
    whatever the board holds: the claimers are not stopped on a count read after failovers or migrations."""
    with anyio.move_on_after(within):
        while set(history.acknowledged) - set(history.consumed):
            try:
                if losses_expected and await board.job_count() == 0:
                    return
            except BackendUnavailable:
                pass
            await anyio.sleep(0.1)


async def still_serving(poster: JobBoard, claimer: JobBoard) -> None:
    with anyio.fail_after(SERVING_WITHIN):
        job = await poster.post("after the failovers")
        claim = await claimer.claim(job, "w")
        await claimer.consume(claim, "fine")
        claim = await poster.claim(await claimer.post("and back"), "w")
        await poster.consume(claim)


async def not_cancelled_alone(load: TaskGroup, work: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
    """``work(*args)`` as a task of ``load``. A CancelledError that ends it while ``load`` was not cancelled
    (one a cancel scope inside did not take as its own) fails the run: in an anyio task group it would cancel
    every task and end the group without an error, the rest of the load (failovers, drain) silently skipped."""
    try:
        await work(*args)
    except asyncio.CancelledError as error:
        if load.cancel_scope.cancel_called:
            raise
        raise RuntimeError(f"{work.__name__} ended by a CancelledError its task group did not send") from error


async def under_load(url: str, history: History, steps: list[tuple[float, Callable[[], str]]],
                     watcher: Callable[[anyio.Event], Coroutine[Any, Any, None]] | None = None, *,
                     losses_expected: bool = False) -> None:
    """One board posting and CLAIMERS claimers on another, on ``url``, while each step runs (in a thread) after
    its pause and prints what it did; then the drain (``losses_expected``: see :func:`drain`), and both boards
    still serve. ``watcher`` runs beside the claimers until they stop."""
    async with open_board(url) as poster, open_board(url) as claimer:
        posting_stopped, posted_last, claiming_stopped = anyio.Event(), anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as load:
            load.start_soon(not_cancelled_alone, load, post_until, poster, posting_stopped, history, posted_last)
            for _ in range(CLAIMERS):
                load.start_soon(not_cancelled_alone, load, claim_and_consume, claimer, claiming_stopped, history)
            if watcher is not None:
                load.start_soon(not_cancelled_alone, load, watcher, claiming_stopped)
            for pause, step in steps:
                await anyio.sleep(pause)
                print(await anyio.to_thread.run_sync(step))
            await anyio.sleep(1.0)
            posting_stopped.set()
            await posted_last.wait()
            await drain(history, poster, 30.0, losses_expected=losses_expected)
            claiming_stopped.set()
        await still_serving(poster, claimer)


def timed(group: SentinelGroup, step: str) -> Callable[[], str]:
    """``step`` performed on ``group``, saying how long it took."""
    def perform_and_say() -> str:
        started = time.monotonic()
        perform(group, step)
        return f"{step}: {time.monotonic() - started:.1f} s ({group.failovers[-1]})"
    return perform_and_say


@pytest.mark.parametrize("durability", ["strict", "default"])
async def test_three_failovers_in_a_row_under_load(durability: str) -> None:
    seed = int(os.environ.get("FAILOVER_SEED") or random.randrange(2**32))
    steps = schedule(seed)
    print(f"FAILOVER_SEED={seed} durability={durability} schedule={steps}")
    history = History()
    with SentinelGroup() as group:
        url = group.url(f"failover-{uuid.uuid4().hex}", durability=durability, session_timeout=3,
                        connect_timeout=20)
        with anyio.fail_after(200):
            await under_load(url, history, [(pause, timed(group, step)) for pause, step in steps],
                             losses_expected=durability != "strict")
        assert len(group.failovers) == 3, group.failovers
        assert group.primary().port == int(group.failovers[-1].rsplit(" ", 1)[1])
        made = group.failovers_made()
    lost, twice = history.tally(f"failovers ({durability})")
    assert len(history.acknowledged) >= 100  # the load ran across the failovers
    if durability == "strict" and len(made) > len(group.failovers):
        # The Sentinels failed over on their own too (a primary stalled past DOWN_AFTER_MS on a loaded host):
        # what a primary acknowledged alone (no replica in sync) is not promised to survive a failover to a
        # server that never received it (docs/backends/redis.md, durability=strict), so this run cannot
        # check the guarantee it is about.
        pytest.skip(f"the Sentinels made {len(made)} failovers, {len(made) - len(group.failovers)} of them "
                    f"unplanned ({made}; performed: {group.failovers}): {len(lost)} lost, {len(twice)} twice, "
                    "not judged")
    if durability == "strict":
        assert lost == [], f"acknowledged posts lost under durability=strict: {lost} ({history.stories(lost)})"
        assert twice == [], f"consumes reported twice under durability=strict: {twice} ({history.stories(twice)})"


async def test_a_strict_board_alone_on_a_primary_whose_replica_was_promoted_does_not_take_its_answers() -> None:
    """The board wrote alone on a primary without a replica; a replica came and was promoted by
    ``SENTINEL FAILOVER`` before the board wrote again (so it never saw the replica). The old primary
    answers as a primary for about 10 s more, and what it acknowledges is discarded when it is demoted:
    every post the board acknowledges must be on the new primary."""
    with SentinelGroup() as group, anyio.fail_after(150):
        url = group.url(f"alone-{uuid.uuid4().hex}", durability="strict", session_timeout=300, connect_timeout=20)
        async with open_board(url) as board:  # a heartbeat every 100 s: no write but the test's below
            old = group.primary()
            await anyio.to_thread.run_sync(lambda: group.kill_primary(restart_as_replica=False))
            await board.post("alone")  # on the new primary, which has no replica
            await anyio.to_thread.run_sync(group.restart_as_replica, old)
            await anyio.to_thread.run_sync(lambda: group.graceful_failover(demoted=False))
            acknowledged = [(await board.post("after", {"i": index})).details["i"] for index in range(5)]
        async with open_board(url) as fresh:  # on the primary the Sentinels name
            found = sorted([job.details["i"] async for job in fresh.iterjobs() if job.name == "after"])
    assert found == acknowledged, f"acknowledged {acknowledged}, on the new primary {found} ({group.failovers})"
