"""A prefetching worker's stop while its board is unreachable: the held jobs' give-back stops at the first
``BackendUnavailable`` (they return when the session ends) instead of waiting out a retry window for each (a
tryout's redis:// outage made a stop take 10 s per held job, 43 s in all)."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import open_board
from jobboard.job import Claim
from jobboard.worker.ahead import ClaimAhead
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)


async def test_the_give_back_stops_at_the_first_unreachable_board(redis_url: str) -> None:
    host, port = redis_url.removeprefix("redis://").rsplit(":", 1)
    async with TcpProxy(host, int(port)) as proxy:
        url = f"redis://{proxy.hosts}/0/outage-{uuid.uuid4().hex}?session_timeout=30&connect_timeout=1"
        with anyio.fail_after(40):
            async with open_board(url) as board:
                for _ in range(4):
                    await board.post("work")
                ahead = ClaimAhead(board, "w", None, prefetch=3)
                assert await ahead.claim_next() is not None and len(ahead.held) == 3
                tried: list[Claim] = []
                release = board.release

                async def counted(claim: Claim) -> None:
                    tried.append(claim)
                    await release(claim)

                board.release = counted  # type: ignore[method-assign]
                await proxy.aclose()  # the server unreachable: refused
                proxy.drop()
                await ahead.release_all(within=30)
                assert len(tried) == 1, [claim.job.id for claim in tried]
                assert len(ahead.held) == 3 and ahead.released == 0  # kept: they return with the session
