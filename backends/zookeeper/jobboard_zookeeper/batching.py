"""``post_many`` on ZooKeeper: chunked multis, each exactly once like a single post.

The postings are cut into chunks that fit one request (``max_request_bytes``,
at most :data:`CHUNK_JOBS` jobs). A chunk is one multi while this board's version
chain holds (:mod:`jobboard_zookeeper.chain`): ``set_data`` of the counter at its
expected version once per job (the new versions are the chunk's sequences), then
every ``jobs/<id>`` of the chunk, the key node of each keyed posting, and one write
marker. Otherwise (another board moved the counter) it is two: a multi of counter
bumps allocates its ids (:meth:`Poster.sequences`), then the multi of creates. The
multi applies entirely or not at all, so the marker resolves a lost reply for the
whole chunk exactly as for a single post (:mod:`jobboard_zookeeper.markers`):
applied, the chunk's jobs are returned; certainly not applied, the chunk is sent
again (with the same ids, or with new ones taken apart from the chain once the
chunk before has its own, so the batch keeps its order on the board).

A chunk whose multi fails (a key that exists already, a duplicate key in the
batch) is posted job by job with :meth:`Poster.post_one`, which returns the job a
key finds. Linked postings (``depends_on``) are chunked apart from unlinked ones: a
linked chunk locates its dependencies, then creates each ``waiting/<id>`` and its
links under its dependencies in one multi (as :meth:`Poster.post_one` does for one),
sent after every chunk before it has ended and before any chunk after it. If a
dependency is missing or moves meanwhile (the multi fails on a link), the chunk is
posted job by job, so "the jobs before a missing dependency stay posted, none after"
holds as for ``post``. :data:`IN_FLIGHT` unlinked chunks are in flight at a time: when one fails
(``UnknownOutcome``, ``BackendUnavailable``), the chunks beside it may have been
posted (keys make repeating the batch safe, as the contract says).

Single unlinked posts made in the same turn of the event loop are written together too
(:class:`Grouper`). A board with many posts in flight (16 tasks posting, a web handler per
request) pays for every request besides its operations: a round trip, the server's request
pipeline, a transaction in its log and an fsync, the client's encoding. So such a post is
queued, and at the end of the loop's turn every post queued is sent as chunks of their own,
each exactly as above: every post of a chunk keeps the single post's promise (a lost reply is
resolved by the chunk's marker; a chunk that finds the counter moved takes its ids apart and is
sent again whole; one that fails on a key is posted again one by one, each post then finding
the job its key names). Ids follow the order of the calls; a post that returned before another
was called has the smaller id. What a post shares with the others of its chunk: their fate when
the reply is lost and ZooKeeper stays out of reach (``UnknownOutcome``, or ``BackendUnavailable``
for a keyed post, as when posted alone), and a few microseconds of latency. A post cancelled
before its chunk is sent is left out of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from jobboard.backend import Prepared
from jobboard.board.codec import Posting
from jobboard.board.gathering import gather_all
from jobboard.errors import BackendUnavailable, DependencyMissing, UnknownOutcome
from jobboard.job import Job
from jobboard_zookeeper.keys import KeyRecord
from jobboard_zookeeper.layout import Paths, job_id
from jobboard_zookeeper.markers import Marker, Markers
from jobboard_zookeeper.ops import Create, Op, OutcomeUnknown
from jobboard_zookeeper.posting import RACE_RETRIES, Poster, counter_moved
from jobboard_zookeeper.zk import ZooKeeper

CHUNK_JOBS = 250
"""Jobs in one chunk at most: small enough that chunks overlap (the server creates one while this
board encodes the next and reads the replies of the last); docs/backends/zookeeper.md, "Batches"."""
IN_FLIGHT = 4
OP_BYTES = 96
"""Bytes a create costs in a request besides its path and data (header, ACL, flags), rounded up."""
Encoded = tuple[Posting, bytes]


@dataclass(slots=True)
class Run:
    """A batch's chunks in flight: ``chained`` until one of them takes its ids apart from the chain;
    from then on every later chunk does too, each after the one before (a chunk taking a new turn
    of the chain meanwhile would get ids below those of a chunk before it)."""

    chained: bool = True
    failed: bool = False
    """A chunk failed: the chunks not yet sent are not sent."""


@dataclass(frozen=True, slots=True)
class Order:
    """A chunk's place in its batch: set ``placed`` once its ids are final (written, or taken
    apart from the chain); ``before`` is the chunk before's; ``run``: the batch's."""

    before: asyncio.Future[None] | None
    placed: asyncio.Future[None]
    run: Run

    @staticmethod
    def done(placed: asyncio.Future[None]) -> None:
        if not placed.done():
            placed.set_result(None)


class BatchPoster:
    """Posts batches for one board (see the module docstring)."""

    def __init__(self, zk: ZooKeeper, paths: Paths, markers: Markers, poster: Poster,
                 max_request_bytes: int) -> None:
        self._zk, self._paths, self._markers, self._poster = zk, paths, markers, poster
        self._max_bytes = max_request_bytes
        self._chunk_bytes = 2 * OP_BYTES + len(paths.mark("m" * 32))
        """A chunk's bytes besides its jobs: the multi and its write marker."""
        self._job_bytes = 2 * OP_BYTES + len(paths.counter(0)) + len(paths.job("0-0000000000000"))
        """A job's bytes besides its posting: its counter step and its create."""
        self._key_bytes = OP_BYTES + len(KeyRecord("0-0000000000000").encode())
        """A key node's bytes besides its path."""
        self._link_bytes = OP_BYTES + 2 * len(paths.waiting("0-0000000000000")) + 8
        """A link's bytes: its create, under its dependency's node (in either directory, any partition)."""
        self.grouper = Grouper(self)
        """Where the board's single unlinked posts go (written with the others of their loop turn)."""

    async def post(self, batch: Sequence[Prepared]) -> list[Job]:
        """Post ``batch`` in order (see the module docstring).

        :raises DependencyMissing: with ``index`` and ``posted`` (the jobs before it stay posted).
        """
        jobs: list[Job] = []
        chunks = self.chunks([(prepared.posting, prepared.raw) for prepared in batch])
        while chunks:
            if chunks[0][0][0].depends_on:
                jobs.extend(await self._post_linked(chunks.pop(0), jobs))
                continue
            run = [chunks.pop(0)]
            while chunks and not chunks[0][0][0].depends_on:
                run.append(chunks.pop(0))
            for posted in await self._pipelined(run):
                jobs.extend(posted)
        return jobs

    async def _pipelined(self, run: list[list[Encoded]]) -> list[list[Job]]:
        """The chunks of ``run``, sent in order, :data:`IN_FLIGHT` at a time: the server works on
        one while this board encodes the next and reads the replies (and watch events) of the last.

        When a chunk fails, the chunks not yet sent are not sent, and the error is raised once the
        chunks in flight have ended (nothing of the batch is written after ``post_many`` raised)."""
        gate = asyncio.Semaphore(IN_FLIGHT)
        loop = asyncio.get_running_loop()
        placed: list[asyncio.Future[None]] = [loop.create_future() for _ in run]
        batch = Run()

        async def post_chunk(index: int) -> list[Job]:
            try:
                async with gate:
                    if batch.failed:
                        return []
                    return await self._post_chunk(run[index], Order(placed[index - 1] if index else None,
                                                                    placed[index], batch))
            except BaseException:
                batch.failed = True
                raise
            finally:
                Order.done(placed[index])

        return await gather_all(*map(post_chunk, range(len(run))))

    def chunks(self, prepared: Sequence[Encoded]) -> list[list[Encoded]]:
        """Runs of unlinked postings and runs of linked ones, each cut to fit a request."""
        chunks: list[list[Encoded]] = []
        chunk: list[Encoded] = []
        size = self._chunk_bytes
        for posting, raw in prepared:
            cost = self._cost(posting, raw)
            if chunk and (bool(posting.depends_on) != bool(chunk[0][0].depends_on) or len(chunk) >= CHUNK_JOBS
                          or size + cost > self._max_bytes):
                chunks.append(chunk)
                chunk, size = [], self._chunk_bytes
            chunk.append((posting, raw))
            size += cost
        return [*chunks, chunk] if chunk else chunks

    def _cost(self, posting: Posting, raw: bytes) -> int:
        cost = self._job_bytes + len(raw) + self._link_bytes * len(posting.depends_on)
        if posting.key is not None:
            cost += self._key_bytes + len(self._paths.key(posting.key))
        return cost

    async def _post_linked(self, chunk: list[Encoded], before: list[Job]) -> list[Job]:
        """A chunk of linked postings in one multi, their dependencies located first; job by job if one
        is missing or moved meanwhile (``before``: the batch's jobs before the chunk).

        :raises DependencyMissing: with the index in the batch and the jobs posted before it.
        """
        parents = await self._parents(chunk)
        if parents is not None:
            placed = asyncio.get_running_loop().create_future()
            jobs = await self._write_chunk(chunk, Order(None, placed, Run()), parents)
            if jobs is not None:
                return jobs
        jobs = []
        for index, (posting, raw) in enumerate(chunk):
            try:
                jobs.append(await self._poster.post_one(posting, raw))
            except DependencyMissing as error:
                raise error.in_batch(len(before) + index, [*before, *jobs]) from None
        return jobs

    async def _parents(self, chunk: list[Encoded]) -> dict[str, str] | None:
        """The node of each dependency of the chunk (``waiting/`` or ``jobs/``), or ``None`` if one is missing."""
        wanted = list(dict.fromkeys(dependency for posting, _ in chunk for dependency in posting.depends_on))
        found = await asyncio.gather(*map(self._poster.locate, wanted))
        if any(path is None for path in found):
            return None
        return {dependency: path for dependency, path in zip(wanted, found, strict=True) if path is not None}

    async def post_chunk(self, chunk: list[Encoded]) -> list[Job]:
        """One chunk of postings (made by :meth:`chunks`), exactly once; its jobs in order."""
        return await self._post_chunk(chunk, Order(None, asyncio.get_running_loop().create_future(), Run()))

    async def _post_chunk(self, chunk: list[Encoded], order: Order) -> list[Job]:
        """One chunk of unlinked postings, exactly once: in one multi (:meth:`_write_chunk`), or job
        by job when the multi fails on a key (each then finds the job its key names)."""
        jobs = await self._write_chunk(chunk, order)
        if jobs is None:
            return [await self._poster.post_one(posting, raw) for posting, raw in chunk]
        return jobs

    async def _write_chunk(self, chunk: list[Encoded], order: Order,
                           parents: dict[str, str] | None = None) -> list[Job] | None:
        """One chunk in one multi (chained: :mod:`jobboard_zookeeper.chain`), or after a multi of
        counter bumps; ``None`` if the multi failed on a key or a link (nothing written). Ids taken
        apart from the chain are taken only once the chunk before has its own, so the batch keeps
        its order on the board. ``parents``: the node of each dependency of a linked chunk."""
        turn = self._poster.chain.take(len(chunk)) if order.run.chained else None
        sequences = turn.sequences if turn is not None else await self._ids_after(order, len(chunk))
        for _ in range(RACE_RETRIES):
            ids = [job_id(posting.priority, sequence) for (posting, _), sequence in zip(chunk, sequences, strict=True)]
            bumps = [] if turn is None else turn.bumps(self._paths.counter(turn.epoch))
            marker = self._markers.new()
            try:
                result = await self._zk.multi([*bumps, *self._creates(chunk, ids, parents), marker.create()])
            except OutcomeUnknown:
                if turn is not None:
                    self._poster.chain.missed(turn, contended=False)
                if await self._resolve(marker, chunk):
                    return self._jobs(chunk, ids, sequences)
                if turn is not None:  # certainly not applied: the same chunk again, with new ids
                    turn, sequences = None, await self._ids_after(order, len(chunk))
                continue  # certainly not applied: the same chunk again
            if result.ok:
                self._markers.done(marker)
                if turn is not None:
                    self._poster.chain.hit(turn)
                return self._jobs(chunk, ids, sequences)
            if turn is not None:
                self._poster.chain.missed(turn, contended=counter_moved(result, bumps))
                if counter_moved(result, bumps):  # another writer moved the counter: take ids apart
                    turn, sequences = None, await self._ids_after(order, len(chunk))
                    continue
            return None  # keys or links decide, one by one
        raise BackendUnavailable(f"{len(chunk)} job(s) posted together (from {chunk[0][0].name!r}) were lost "
                                 f"{RACE_RETRIES} times on their way (certainly not written); try again")

    async def _ids_after(self, order: Order, count: int) -> list[int]:
        order.run.chained = False
        if order.before is not None:
            await asyncio.wait([order.before])
        sequences = await self._poster.sequences(count)
        Order.done(order.placed)
        return sequences

    def _creates(self, chunk: list[Encoded], ids: list[str], parents: dict[str, str] | None) -> list[Op]:
        """As :meth:`Poster.post_one` writes each posting: its key, then its job (or waiting job and links)."""
        ops: list[Op] = []
        for (posting, raw), new_id in zip(chunk, ids, strict=True):
            if posting.key is not None:
                ops.append(Create(self._paths.key(posting.key), KeyRecord(new_id).encode()))
            if not posting.depends_on:
                ops.append(Create(self._paths.job(new_id), raw))
                continue
            assert parents is not None
            ops.append(Create(self._paths.waiting(new_id), raw))
            ops += [Create(f"{parents[dependency]}/{new_id}") for dependency in posting.depends_on]
        return ops

    @staticmethod
    def _jobs(chunk: list[Encoded], ids: list[str], sequences: list[int]) -> list[Job]:
        return [posting.to_job(new_id, sequence)
                for (posting, _), new_id, sequence in zip(chunk, ids, sequences, strict=True)]

    async def _resolve(self, marker: Marker, chunk: list[Encoded]) -> bool:
        """Whether a chunk whose reply was lost was applied (as :meth:`Poster._resolve`)."""
        try:
            return await self._markers.applied(marker)
        except BackendUnavailable as error:
            if all(posting.key is not None for posting, _ in chunk):
                raise  # posting the batch again with its keys finds what was written
            raise UnknownOutcome(
                f"{len(chunk)} job(s) posted together (from {chunk[0][0].name!r}): the reply was lost and "
                f"ZooKeeper stayed unreachable, so whether it was posted cannot be told ({error}); "
                "post with keys to retry safely") from error


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
