"""zookeeper://: a claim whose caller gave up (cancelled) before its reply.

The conformance suite checks that such a claim never leaves the job claimed by no caller and
counts no attempt; this checks what only this backend's bookkeeping could get wrong.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import Claim, open_board
from jobboard_zookeeper import settle
from jobboard_zookeeper.ops import Op, TxnResult

pytestmark = pytest.mark.timeout(60)


async def test_a_cancelled_losing_claim_does_not_make_the_winning_one_look_lost(
        zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two claims of one job on one board: the loser's reply is late and its caller gives up.
    The winner (same board, same generation) must stay current (review of f1fac48)."""
    apply = settle.Settler._apply_claim

    async def late_for_the_loser(self: settle.Settler, job_id: str, ops: list[Op],
                                 unheld: settle.Held) -> tuple[bool, TxnResult | None]:
        outcome = await apply(self, job_id, ops, unheld)
        if unheld.owner == "loser":
            await anyio.sleep(0.05)  # the reply travels slowly; the caller gives up meanwhile
        return outcome

    monkeypatch.setattr(settle.Settler, "_apply_claim", late_for_the_loser)
    with anyio.fail_after(30):
        async with open_board(f"zookeeper://{zk_hosts}/cancelled/{uuid.uuid4().hex}") as board:
            job = await board.post("x")
            won: list[Claim] = []

            async def lose() -> None:
                with anyio.move_on_after(0.02):
                    await board.claim(job, "loser")

            async def win() -> None:
                won.append(await board.claim(job, "winner"))

            async with anyio.create_task_group() as group:
                group.start_soon(win)
                group.start_soon(lose)
            with anyio.move_on_after(0.5) as still_current:
                await board.watch_claim(won[0])  # returns only if the claim is (taken for) lost
            assert still_current.cancelled_caught
            await board.consume(won[0], "done")

