"""The raw-aiozk ceiling for a ZooKeeper job cycle (aiozk 0.32): the fewest znode operations a claim cycle
needs, with no job board around them and no contention.

    python -m benchmarks.peers.aiozk_ceiling --hosts 127.0.0.1:2181 --jobs 500 --workers 4 --repeat 3

Each run uses a fresh top-level path ``/bench-peers-aiozk-<hex>`` (children ``jobs`` and ``locks``) on one
aiozk session and deletes it afterwards. Post: W coroutines create the N job znodes (persistent sequential,
``jobs/job-``), so W creates are in flight. Cycle: the created names are dealt round-robin to W coroutines
(pre-partitioned, so no two ever race for a job); each, per job, creates an ephemeral lock ``locks/<job>``
and then sends ONE multi deleting the lock and the job, built as a raw ``protocol.TransactionRequest`` so a
failed op is seen (aiozk's ``Transaction`` helper returns a falsy result instead of raising).

Reported per run: post_per_s (creates per second); cycles_per_s (lock create + multi) from just before the
first lock to the last multi; failed_claims (always 0 here: nothing contends); zk_requests_per_job in the
cycle phase (counted at ``client.send``; 2 by construction); cpu_s of this process during the cycle phase;
left (job znodes still there afterwards, should be 0). A ceiling to read jobboard's numbers against, not a
job board: there is no discovery, no ownership check and no watch.

``--client fixed`` runs the same requests on the client fixes jobboard uses (``jobboard_zookeeper.zk``:
its own reader, no timer per request, multis and replies encoded by ``jobboard_zookeeper.fastwire``), so
that jobboard's ratio to it shows the board's own overhead, not aiozk's; ``stock`` is plain aiozk.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiozk import ZKClient, protocol

from benchmarks.peers.common import ConsumePhase, Stopwatch, Tally, make_parser, per_job, report, unique_path


class CountingZk:
    """Raw requests on one aiozk client, counted."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests = 0

    async def send(self, request: Any) -> Any:
        self.requests += 1
        return await self.client.send(request)

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False,
                     sequential: bool = False) -> str:
        request = protocol.Create2Request(path=path, data=data, acl=[protocol.UNRESTRICTED_ACCESS])
        request.set_flags(ephemeral, sequential, False)
        response = await self.send(request)
        return str(response.path)

    async def delete_both(self, lock: str, job: str) -> None:
        """One multi: delete the lock and the job, or neither; raises if it failed."""
        multi = protocol.TransactionRequest()
        multi.add(protocol.DeleteRequest(path=lock, version=-1))
        multi.add(protocol.DeleteRequest(path=job, version=-1))
        response = await self.send(multi)
        failures = [result for result in response.responses if isinstance(result, Exception)]
        if failures:
            raise RuntimeError(f"multi delete of {job} failed: {failures!r}")


class FixedZk(CountingZk):
    """The same requests through jobboard's ZooKeeper session (``jobboard_zookeeper.zk``)."""

    def __init__(self, zk: Any) -> None:
        super().__init__(zk._client)
        self.zk = zk

    async def send(self, request: Any) -> Any:
        self.requests += 1
        return (await self.zk._call(request, retry=False))[1]

    async def delete_both(self, lock: str, job: str) -> None:
        from jobboard_zookeeper.ops import Delete

        self.requests += 1
        result = await self.zk.multi([Delete(lock), Delete(job)])
        if not result.ok:
            raise RuntimeError(f"multi delete of {job} failed: {result.failure()!r}")


async def post_jobs(zk: CountingZk, jobs_dir: str, jobs: int, workers: int) -> tuple[list[str], float]:
    """Create the job znodes, ``workers`` at a time; returns their paths and creates per second."""
    async def poster(first: int) -> list[str]:
        return [await zk.create(f"{jobs_dir}/job-", b'{"i": %d}' % index, sequential=True)
                for index in range(first, jobs, workers)]

    watch = Stopwatch()
    parts = await asyncio.gather(*(poster(first) for first in range(workers)))
    return [path for part in parts for path in part], jobs / watch.elapsed()


async def cycle(zk: CountingZk, locks_dir: str, jobs: list[str], owner: bytes, tally: Tally) -> None:
    for job in jobs:
        lock = await zk.create(f"{locks_dir}/{job.rsplit('/', 1)[1]}", owner, ephemeral=True)
        await zk.delete_both(lock, job)
        tally.consumed()


async def cycle_phase(zk: CountingZk, root: str, paths: list[str], workers: int,
                      zk_pid: int | None = None) -> dict[str, Any]:
    tally = Tally()
    requests_before = zk.requests
    phase = ConsumePhase(zk_pid)
    await asyncio.gather(*(cycle(zk, f"{root}/locks", paths[first::workers], b"w%d" % first, tally)
                           for first in range(workers)))
    phase.stop()
    return {**phase.figures(tally), "zk_requests_per_job": per_job(zk.requests - requests_before, len(paths))}


async def measure(zk: CountingZk, root: str, args: argparse.Namespace) -> dict[str, Any]:
    for node in (root, f"{root}/jobs", f"{root}/locks"):
        await zk.create(node, b"")
    paths, posts_per_s = await post_jobs(zk, f"{root}/jobs", args.jobs, args.workers)
    figures = await cycle_phase(zk, root, paths, args.workers, args.zk_pid)
    left = len(await zk.client.get_children(f"{root}/jobs"))
    return {"post_per_s": round(posts_per_s, 1), **figures, "left": left}


async def one_run(args: argparse.Namespace) -> dict[str, Any]:
    if args.client == "fixed":
        from jobboard_zookeeper.zk import ZooKeeper

        zk = ZooKeeper(args.hosts, session_timeout=10, connect_timeout=10)
        await zk.start()
        return await measured(FixedZk(zk), unique_path("aiozk-fixed"), args, zk.close)
    client = ZKClient(args.hosts, session_timeout=10)
    await client.start()
    return await measured(CountingZk(client), unique_path("aiozk"), args, client.close)


async def measured(zk: CountingZk, root: str, args: argparse.Namespace,
                   close: Callable[[], Awaitable[object]]) -> dict[str, Any]:
    """:func:`measure` within ``--timeout``; then, whatever happened, ``root`` deleted and the session closed."""
    try:
        async with asyncio.timeout(args.timeout):
            return await measure(zk, root, args)
    finally:
        try:
            async with asyncio.timeout(60):
                await zk.client.deleteall(root)
        finally:
            await close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = make_parser((__doc__ or "").split("\n\n")[0])
    parser.add_argument("--client", choices=("stock", "fixed"), default="stock",
                        help="plain aiozk, or jobboard's session with its client fixes")
    args = parser.parse_args(argv)
    runs = [asyncio.run(one_run(args)) for _ in range(args.repeat)]
    return report("cycle", "aiozk-ceiling" if args.client == "stock" else "aiozk-ceiling-fixed", args, runs)


if __name__ == "__main__":
    main()
