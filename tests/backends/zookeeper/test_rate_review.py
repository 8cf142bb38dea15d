"""Review of zookeeper:// flow control's remembered groups (21fdfc4, 27c67f4): a job's group, once read, is kept
in ``Flow.groups`` (cleared past 100 000 jobs) so held groups' jobs are passed over unread, and a sequence's head
is found from it. A bug found is a case marked ``xfail(strict=True)`` naming it; the others check a guarantee."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import HeldBack, open_board
from jobboard_zookeeper import ZooKeeperBackend

pytestmark = pytest.mark.timeout(60)


def board_url(hosts: str) -> str:
    return f"zookeeper://{hosts}/ratereview/{uuid.uuid4().hex}?session_timeout=2"


async def test_a_sequence_keeps_its_head_when_the_group_cache_is_cleared(zk_hosts: str) -> None:
    """A long-running board has read 100 000 jobs (its cache is full, the sequence's first job among them);
    the next head check reads one unknown job: the sequence's second job must still be held back."""
    with anyio.fail_after(30):
        async with open_board(board_url(zk_hosts)) as board:
            assert isinstance(board.backend, ZooKeeperBackend)
            await board.set_limit("acct", sequence=True)
            first = await board.post("hook", group="acct")
            await board.post("plain")  # unknown to the cache: read by the head check
            second = await board.post("hook", group="acct")
            groups = board.backend._flow.groups
            groups.update({f"0-{n:013d}x": None for n in range(100_001)})  # jobs read long ago
            groups[first.id] = "acct"  # read recently (a claim pass met it)
            with pytest.raises(HeldBack) as held:
                await board.claim(second, "w")
            assert held.value.why == "sequence"


async def test_remembered_groups_pass_over_only_the_held_group(zk_hosts: str) -> None:
    """A rate-held group's jobs are passed over (remembered), a plain job and another group's job behind them
    are still claimed; a held job trashed and requeued (same id, same group) is claimed once its permit is due."""
    with anyio.fail_after(30):
        url = board_url(zk_hosts)
        async with open_board(url) as board, open_board(url) as other:
            await board.set_limit("api", rate=(1, 1.0))
            held = [await board.post("call", group="api") for _ in range(4)]
            free = [await board.post("call"), await board.post("call", group="other")]
            first = await board.claim_next("w")
            assert first is not None and first.job.id == held[0].id
            taken = [await other.claim_next("w") for _ in range(3)]
            assert [c.job.id if c else None for c in taken] == [free[0].id, free[1].id, None]
            with pytest.raises(HeldBack):
                await board.claim(held[1], "w")
            await board.cancel(held[2], "moved")
            await board.requeue(held[2])
            await anyio.sleep(1.1)
            nxt = await other.claim_next("w")
            assert nxt is not None and nxt.job.id == held[1].id
