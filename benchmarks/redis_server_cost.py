"""Server time per board operation on redis:// (from Redis' own ``INFO commandstats``).

    python -m benchmarks.redis_server_cost --url redis://127.0.0.1:6379 --jobs 5000

Posts N jobs (16 in flight), then claims them (``claim_next``), then consumes them, resetting
the server's statistics before each phase: the server's microseconds per ``FCALL`` of each
operation and the commands it ran inside. Server time does not depend on the client, so this is
less sensitive to a busy machine than throughput. Use a server no one else is using. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from jobboard import Claim, open_board
from jobboard_redis import RedisBackend, RedisBoard


async def stats(board: RedisBoard) -> dict[str, dict[str, float]]:
    text = (await board.backend.client.command("INFO", "commandstats")).decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line.partition(":")
            values = dict(field.split("=") for field in fields.split(","))
            found[name[8:]] = {"calls": float(values["calls"]), "usec": float(values["usec"])}
    return found


async def phase(board: RedisBoard, work: Any) -> dict[str, Any]:
    await board.backend.client.command("CONFIG", "RESETSTAT")
    count = await work()
    found = await stats(board)
    fcall = found.get("fcall", {"calls": 0.0, "usec": 0.0})
    inside = {name: round(value["calls"] / count, 2) for name, value in found.items()
              if name not in ("fcall", "xread", "config|resetstat", "info") and value["calls"] >= count / 2}
    return {"fcall_us_per_op": round(fcall["usec"] / max(count, 1), 1),
            "inner_us_per_op": round(sum(v["usec"] for n, v in found.items()
                                         if n not in ("fcall", "xread", "config|resetstat", "info")) / count, 1),
            "xread_us_per_op": round(found.get("xread", {"usec": 0.0})["usec"] / count, 1),
            "commands_per_op": inside}


async def main_async(url: str, jobs: int) -> dict[str, Any]:
    async with open_board(f"{url}/0/cost-{uuid.uuid4().hex[:8]}") as board:
        assert isinstance(board.backend, RedisBackend)
        claims: list[Claim] = []

        async def many(make: Any, items: list[Any]) -> int:
            for start in range(0, len(items), 16):
                await asyncio.gather(*(make(item) for item in items[start:start + 16]))
            return len(items)

        async def claim(_: int) -> None:
            found = await board.claim_next("me")
            assert found is not None
            claims.append(found)

        report = {"post": await phase(board, lambda: many(lambda i: board.post("cost", {"i": i}), list(range(jobs)))),
                  "claim_next": await phase(board, lambda: many(claim, list(range(jobs)))),
                  "consume": await phase(board, lambda: many(board.consume, claims))}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args.url, args.jobs)), indent=1))


if __name__ == "__main__":
    main()
