"""Connection resets that meet a drain: claimers consume jobs through a :class:`TcpProxy` that is reset
as they go, and each reset that cuts board calls in flight is counted (tests/backends/redis/test_faults.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from jobboard import open_board
from tests.support.tcpproxy import TcpProxy

DRAINERS, DROPS, DROP_EVERY = 8, 10, 15
"""Claimers; connection resets per run, one each time DROP_EVERY more jobs are consumed."""


class CallsInFlight:
    """The board calls under way, and the drops that cut one sent since the drop before."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.calls: dict[object, int] = {}
        """Each call under way: the number of drops before it began."""
        self.drops = self.cuts = 0

    @contextmanager
    def call(self) -> Iterator[None]:
        token = object()
        self.calls[token] = self.drops
        try:
            yield
        finally:
            del self.calls[token]

    def drop(self) -> None:
        self.cuts += self.drops in self.calls.values()
        self.drops += 1
        self.proxy.drop()


async def drain_while_dropping(proxy: TcpProxy, url: str) -> tuple[list[str], list[str], int]:
    """Post 200 jobs, drain them with DRAINERS claimers while the proxy resets the connections;
    returns (posted, consumed, drops that cut calls in flight)."""
    consumed: list[str] = []
    flight = CallsInFlight(proxy)
    async with open_board(url) as board:
        posted = [(await board.post("j", {"i": i}, key=f"k{i}")).id for i in range(200)]

        async def drain() -> None:
            while True:
                with flight.call():
                    claim = await board.claim_next("w")
                if claim is None:
                    return
                with flight.call():
                    await board.consume(claim, claim.job.id)
                consumed.append(claim.job.id)

        async def chaos() -> None:
            for drop in range(1, DROPS + 1):
                while len(consumed) < drop * DROP_EVERY:  # noqa: ASYNC110 - paced by the drainers' progress
                    await anyio.sleep(0.002)
                flight.drop()

        async with anyio.create_task_group() as group:
            group.start_soon(chaos)
            async with anyio.create_task_group() as drainers:
                for _ in range(DRAINERS):
                    drainers.start_soon(drain)
            group.cancel_scope.cancel()
        assert await board.job_count() == 0
    return posted, consumed, flight.cuts
