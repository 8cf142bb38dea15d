"""Which async Redis client for redis://, and the raw Lua ceiling beside the board itself.

The clients (redis.asyncio with hiredis, coredis, and the backend's own pipelined
client over hiredis' parser, ``jobboard_redis.client_wire``) run the board's
operations as Lua scripts of the same shape as the backend's (a post with an
event, a fenced claim of the best job with an event, a fenced consume with an
event): the raw ceiling. ``jobboard`` runs the same full cycle through a
redis:// board (post -> claim_next -> consume). W tasks in one process, the
same server, the same run, interleaved rounds. Prints JSON.

    python -m benchmarks.redis_clients [--url redis://127.0.0.1:6379] [--seconds 3] [--workers 16]
        [--systems wire,jobboard,redis.asyncio,coredis]

Without ``--url`` a throwaway server is started (tests.support.redisserver).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

POST = """
local p = KEYS[1]
local id = redis.call('INCR', p .. 'seq')
redis.call('HSET', p .. 'job:' .. id, 'p', ARGV[1], 'gen', 0)
redis.call('ZADD', p .. 'ready', id, id)
redis.call('XADD', p .. 'ev', 'MAXLEN', '~', 100000, '*', 'k', 'posted', 'j', id)
return id
"""
CLAIM = """
local p = KEYS[1]
local t = redis.call('TIME')
local head = redis.call('ZPOPMIN', p .. 'ready')
if #head == 0 then return false end
local id = head[1]
local gen = redis.call('HINCRBY', p .. 'job:' .. id, 'gen', 1)
redis.call('HSET', p .. 'job:' .. id, 'owner', ARGV[1], 'at', t[1])
redis.call('XADD', p .. 'ev', 'MAXLEN', '~', 100000, '*', 'k', 'claimed', 'j', id)
return {id, gen, redis.call('HGET', p .. 'job:' .. id, 'p')}
"""
CONSUME = """
local p = KEYS[1]
local key = p .. 'job:' .. ARGV[1]
local f = redis.call('HMGET', key, 'gen', 'owner')
if f[1] ~= ARGV[2] then return 'lost' end
if f[2] ~= ARGV[3] then return 'owner' end
redis.call('DEL', key)
redis.call('XADD', p .. 'ev', 'MAXLEN', '~', 100000, '*', 'k', 'consumed', 'j', ARGV[1])
return 'ok'
"""

Call = Callable[[str, list[str], list[Any]], Awaitable[Any]]


async def cycles(call: Call, prefix: str, workers: int, seconds: float) -> float:
    """Full post -> claim -> consume cycles per second with ``workers`` concurrent tasks."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await call(POST, [prefix], [b"\x81\xa1v\x01" * 8])
            got = await call(CLAIM, [prefix], ["w"])
            if got:
                job, gen = got[0], got[1]
                job = job.decode() if isinstance(job, bytes) else str(job)
                await call(CONSUME, [prefix], [job, str(gen), "w"])
                done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return done / (time.perf_counter() - started)


async def with_redis_py(url: str, workers: int, seconds: float) -> float:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(url, max_connections=workers)
    scripts = {text: client.register_script(text) for text in (POST, CLAIM, CONSUME)}

    async def call(text: str, keys: list[str], args: list[Any]) -> Any:
        return await scripts[text](keys=keys, args=args)

    try:
        return await cycles(call, f"bench:{{{uuid.uuid4().hex}}}:", workers, seconds)
    finally:
        await client.aclose()


async def with_coredis(url: str, workers: int, seconds: float) -> float:
    import coredis

    client: Any = coredis.Redis.from_url(url, max_connections=workers)
    async with client:
        scripts = {text: client.register_script(text) for text in (POST, CLAIM, CONSUME)}

        async def call(text: str, keys: list[str], args: list[Any]) -> Any:
            return await scripts[text](keys=keys, args=args)

        return await cycles(call, f"bench:{{{uuid.uuid4().hex}}}:", workers, seconds)


async def with_wire(url: str, workers: int, seconds: float) -> float:
    """The raw ceiling: the same scripts through the backend's own client (EVALSHA, pipelined)."""
    import hashlib

    from jobboard_redis.client_wire import connect
    from jobboard_redis.options import parse_redis_url

    options = parse_redis_url(url + "/0/x")
    wire, _ = await connect(options.host, options.port, reply_timeout=10, connect_timeout=5, tls=None)
    shas = {text: hashlib.sha1(text.encode()).hexdigest() for text in (POST, CLAIM, CONSUME)}
    for text in shas:
        await wire.send(("SCRIPT", "LOAD", text))

    async def call(text: str, keys: list[str], args: list[Any]) -> Any:
        return await wire.send(("EVALSHA", shas[text], len(keys), *keys, *args))

    try:
        return await cycles(call, f"bench:{{{uuid.uuid4().hex}}}:", workers, seconds)
    finally:
        wire.close()


async def with_jobboard(url: str, workers: int, seconds: float) -> float:
    """The board's full cycle: post -> claim_next -> consume, W tasks sharing one board."""
    from jobboard import open_board

    done = 0
    async with open_board(f"{url}/0/bench-{uuid.uuid4().hex[:8]}") as board:
        stop = time.perf_counter() + seconds

        async def worker(index: int) -> None:
            nonlocal done
            owner = f"w{index}"
            while time.perf_counter() < stop:
                await board.post("bench", {"v": 1})
                claim = await board.claim_next(owner)
                if claim is not None:
                    await board.consume(claim)
                    done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(index) for index in range(workers)))
        return done / (time.perf_counter() - started)


SYSTEMS: dict[str, Callable[[str, int, float], Awaitable[float]]] = {
    "wire": with_wire, "jobboard": with_jobboard, "redis.asyncio+hiredis": with_redis_py, "coredis": with_coredis}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("redis", "hiredis", "coredis"):  # the backend's own client is hiredis' parser
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


async def measure(url: str, workers: int, seconds: float, rounds: int, systems: list[str]) -> dict[str, Any]:
    results: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):  # interleaved: the machine is noisy, compare within a run
        for name in systems:
            results[name].append(round(await SYSTEMS[name](url, workers, seconds)))
    medians = {name: sorted(values)[len(values) // 2] for name, values in results.items()}
    ratios = {}
    if "wire" in results and "jobboard" in results:
        ratios["jobboard/wire per round"] = [round(board / wire, 3) for board, wire
                                             in zip(results["jobboard"], results["wire"], strict=True)]
    return {"workers": workers, "seconds": seconds, "versions": versions(), "cycles_per_s": results,
            "median": medians, **ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default="wire,jobboard,redis.asyncio+hiredis,coredis")
    args = parser.parse_args()
    systems = args.systems.split(",")
    if args.url:
        report = asyncio.run(measure(args.url, args.workers, args.seconds, args.rounds, systems))
    else:
        from tests.support.redisserver import RedisServer, ensure_redis_installed

        ensure_redis_installed()
        with RedisServer() as server:
            report = asyncio.run(measure(server.url(""), args.workers, args.seconds, args.rounds, systems))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
