"""Idempotency keys: posting the same order twice makes one job."""

from __future__ import annotations

import anyio

from jobboard import open_board


async def main() -> None:
    async with open_board("memory://shop?key_retention=3600") as board:
        first = await board.post("charge", {"order": 42, "cents": 1999}, key="order-42")
        again = await board.post("charge", {"order": 42, "cents": 1999}, key="order-42")
        print(f"same job: {again.id == first.id}, jobs on the board: {await board.job_count()}")

        claim = await board.claim_next("worker-1")
        assert claim is not None
        await board.consume(claim, "charged")
        late = await board.post("charge", {"order": 42, "cents": 1999}, key="order-42")
        print(f"after consume: {late.id == first.id}, attempts {late.attempts}, "
              f"jobs on the board: {await board.job_count()}")

        other = await board.post("charge", {"order": 43, "cents": 500}, key="order-43")
        print(f"another key: {other.id != first.id}, key {other.key!r}")


anyio.run(main)
