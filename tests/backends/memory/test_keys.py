"""memory:// forgets idempotency keys settled longer ago than the retention (none pile up)."""

from __future__ import annotations

import anyio

from jobboard import open_board
from jobboard_memory import MemoryBackend


async def test_settled_keys_past_the_retention_are_dropped() -> None:
    with anyio.fail_after(10):
        async with open_board("memory://?key_retention=0.05") as board:
            assert isinstance(board.backend, MemoryBackend)
            for index in range(50):
                job = await board.post("x", key=f"k{index}")
                await board.consume(await board.claim(job, "w"))
            living = await board.post("x", key="living")
            assert len(board.backend._store.keys) == 51
            await anyio.sleep(0.1)
            assert (await board.post("x", key="living")).id == living.id
            assert list(board.backend._store.keys) == ["living"]
