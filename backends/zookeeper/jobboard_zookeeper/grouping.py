"""Posts made in the same turn of the event loop are written together, in one multi.

A board with many posts in flight (16 tasks posting, a web handler per request)
pays for every request besides its operations: a round trip, the server's request
pipeline, a transaction in its log and an fsync, the client's encoding. So
:meth:`Poster.post` does not send an unlinked post at once: it queues it, and at
the end of the loop's turn every post queued is sent as one chunk of
:class:`~jobboard_zookeeper.batching.BatchPoster` (one multi: the counter moves,
every job and key is created, one write marker). The multi applies entirely or
not at all, so every post of the group keeps the single post's promise: a lost
reply is resolved by the group's marker (applied: every job is returned; certainly
not applied: sent again); a group that finds the counter moved takes its ids apart
and is sent again whole; one that fails on a key is posted again one by one, each
post then finding the job its key names. Ids follow the order of the calls; a post
that returned before another was called has the smaller id, as before.

What a post shares with the others of its group: their fate when the reply is
lost and ZooKeeper stays out of reach (``UnknownOutcome``, or ``BackendUnavailable``
for a keyed post, as when posted alone), and a few microseconds of latency.
A post cancelled before its group is sent is left out of it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from jobboard.board.codec import Posting
from jobboard.errors import BackendUnavailable, UnknownOutcome
from jobboard.job import Job

if TYPE_CHECKING:
    from jobboard_zookeeper.batching import BatchPoster, Encoded

Waiting = tuple[Posting, bytes, "asyncio.Future[Job]"]


class Grouper:
    """Queues a board's unlinked posts and sends each turn's queue as chunks."""

    def __init__(self, batches: BatchPoster) -> None:
        self._batches = batches
        self._queue: list[Waiting] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.groups = 0
        """Groups sent (for tests and benchmarks: posts per request)."""

    async def post(self, posting: Posting, raw: bytes) -> Job:
        loop = asyncio.get_running_loop()
        if not self._queue:
            loop.call_soon(self._flush)
        future: asyncio.Future[Job] = loop.create_future()
        self._queue.append((posting, raw, future))
        return await future

    def _flush(self) -> None:
        queue, self._queue = [entry for entry in self._queue if not entry[2].done()], []
        if not queue:
            return
        futures = iter([future for _, _, future in queue])
        for chunk in self._batches.chunks([(posting, raw) for posting, raw, _ in queue]):  # in order
            self.groups += 1
            task = asyncio.get_running_loop().create_task(self._send(chunk, [next(futures) for _ in chunk]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, chunk: list[Encoded], futures: list[asyncio.Future[Job]]) -> None:
        try:
            jobs = await self._batches.post_chunk(chunk)
        except UnknownOutcome as error:
            for (posting, _), future in zip(chunk, futures, strict=True):
                failure = error if posting.key is None else BackendUnavailable(
                    f"job {posting.name!r}: {error}; posting again with its key finds it if it was written")
                _settle(future, failure)
            return
        except BaseException as error:  # BackendUnavailable, a conflict, a cancelled board: every post's
            for future in futures:
                _settle(future, error)
            if not isinstance(error, Exception):
                raise
            return
        for job, future in zip(jobs, futures, strict=True):
            if not future.done():
                future.set_result(job)


def _settle(future: asyncio.Future[Job], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error if isinstance(error, Exception) else BackendUnavailable("the post was cancelled"))
