"""postgresql://: post on one board -> ``wait()`` returns on another (same process, same server).

    python -m benchmarks.postgresql_wake --url postgresql://postgres@127.0.0.1:5432/postgres --samples 200

Prints one JSON object, in milliseconds (median, p10, p90 of ``--samples`` wake-ups): ``from_call`` (from
the call to ``post``: its own round trip and commit included, as ``benchmarks.postgresql_cycle``'s
``wake_ms``), ``post`` (that call alone) and ``from_commit`` (from ``post`` returning, its COMMIT done, to
``wait()`` returning: the NOTIFY's delivery and the woken waiter's read).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from benchmarks.common import print_json_of
from jobboard import open_board


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(value * 1000 for value in values)
    return {"median": round(statistics.median(ordered), 3), "p10": round(ordered[len(ordered) // 10], 3),
            "p90": round(ordered[9 * len(ordered) // 10], 3)}


async def main(url: str, samples: int) -> dict[str, Any]:
    board_url = f"{url}{'&' if '?' in url else '?'}board=wake-{uuid.uuid4().hex[:8]}"
    from_call, post, from_commit = [], [], []
    async with open_board(board_url) as poster, open_board(board_url) as waiter:
        for _ in range(samples):
            task = asyncio.ensure_future(waiter.wait())
            await asyncio.sleep(0.03)  # the waiter has looked, marked itself idle, looked again and sleeps
            started = time.perf_counter()
            await poster.post("w")
            posted = time.perf_counter()
            await task
            ended = time.perf_counter()
            from_call.append(ended - started)
            post.append(posted - started)
            from_commit.append(ended - posted)
            claim = await waiter.claim_next("w")
            assert claim is not None
            await waiter.consume(claim)
    return {"from_call": spread(from_call), "post": spread(post), "from_commit": spread(from_commit),
            "samples": samples}


if __name__ == "__main__":
    print_json_of("postgresql_wake", main, samples=200)
