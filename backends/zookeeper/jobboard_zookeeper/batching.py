"""``post_many`` on ZooKeeper: chunked multis, each exactly once like a single post.

The postings are cut into chunks that fit one request (``max_request_bytes``,
at most :data:`CHUNK_JOBS` jobs). A chunk costs two requests whatever its size:
one multi of counter bumps allocates its ids (:meth:`Poster.sequences`), and one
multi creates every ``jobs/<id>`` of the chunk, the key node of each keyed
posting, and one write marker. The multi applies entirely or not at all, so the
marker resolves a lost reply for the whole chunk exactly as for a single post
(:mod:`jobboard_zookeeper.markers`): applied, the chunk's jobs are returned;
certainly not applied, the same chunk is sent again with the same ids.

A chunk whose multi fails (a key that exists already, a duplicate key in the
batch) is posted job by job with :meth:`Poster.post`, which returns the job a key
finds. A linked posting (``depends_on``) is posted alone, after every chunk before
it, so "the jobs before a missing dependency stay posted" holds as for ``post``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from jobboard.board import JobBoard, NewJob
from jobboard.codec import Posting
from jobboard.errors import BackendUnavailable, UnknownOutcome
from jobboard.job import Job
from jobboard_zookeeper.keys import KeyRecord
from jobboard_zookeeper.layout import Paths, job_id
from jobboard_zookeeper.markers import Marker, Markers
from jobboard_zookeeper.ops import Create, Op, OutcomeUnknown
from jobboard_zookeeper.posting import RACE_RETRIES, Poster
from jobboard_zookeeper.zk import ZooKeeper

CHUNK_JOBS = 2000
IN_FLIGHT = 2
OP_BYTES = 96
"""Bytes a create costs in a request besides its path and data (header, ACL, flags), rounded up."""
Prepared = tuple[Posting, bytes]


class BatchPoster:
    """Posts batches for one board (see the module docstring)."""

    def __init__(self, zk: ZooKeeper, paths: Paths, markers: Markers, poster: Poster,
                 max_request_bytes: int) -> None:
        self._zk, self._paths, self._markers, self._poster = zk, paths, markers, poster
        self._max_bytes = max_request_bytes

    async def post(self, prepared: Sequence[Prepared]) -> list[Job]:
        jobs: list[Job] = []
        chunks = self.chunks(prepared)
        while chunks:
            if chunks[0][0][0].depends_on:
                jobs.append(await self._poster.post(*chunks.pop(0)[0]))
                continue
            run = [chunks.pop(0)]
            while chunks and len(run) < IN_FLIGHT and not chunks[0][0][0].depends_on:
                run.append(chunks.pop(0))
            for posted in await asyncio.gather(*map(self._post_chunk, run)):
                jobs.extend(posted)
        return jobs

    def chunks(self, prepared: Sequence[Prepared]) -> list[list[Prepared]]:
        """Runs of unlinked postings cut to fit a request; each linked posting alone."""
        chunks: list[list[Prepared]] = []
        chunk: list[Prepared] = []
        size = 2 * OP_BYTES + len(self._paths.mark("m" * 32))
        for posting, raw in prepared:
            cost = self._cost(posting, raw)
            if chunk and (posting.depends_on or len(chunk) >= CHUNK_JOBS or size + cost > self._max_bytes):
                chunks.append(chunk)
                chunk, size = [], 2 * OP_BYTES + len(self._paths.mark("m" * 32))
            if posting.depends_on:
                chunks.append([(posting, raw)])
                continue
            chunk.append((posting, raw))
            size += cost
        return [*chunks, chunk] if chunk else chunks

    def _cost(self, posting: Posting, raw: bytes) -> int:
        cost = OP_BYTES + len(self._paths.job("0-0000000000000")) + len(raw)
        if posting.key is not None:
            cost += OP_BYTES + len(self._paths.key(posting.key)) + len(KeyRecord("0-0000000000000").encode())
        return cost

    async def _post_chunk(self, chunk: list[Prepared]) -> list[Job]:
        sequences = await self._poster.sequences(len(chunk))
        ids = [job_id(posting.priority, sequence) for (posting, _), sequence in zip(chunk, sequences, strict=True)]
        jobs = [posting.to_job(new_id, sequence)
                for (posting, _), new_id, sequence in zip(chunk, ids, sequences, strict=True)]
        ops: list[Op] = []
        for (posting, raw), new_id in zip(chunk, ids, strict=True):
            if posting.key is not None:
                ops.append(Create(self._paths.key(posting.key), KeyRecord(new_id).encode()))
            ops.append(Create(self._paths.job(new_id), raw))
        for _ in range(RACE_RETRIES):
            marker = self._markers.new()
            try:
                result = await self._zk.multi([*ops, marker.create()])
            except OutcomeUnknown:
                if await self._resolve(marker, chunk):
                    return jobs
                continue  # certainly not applied: the same chunk again
            if result.ok:
                self._markers.done(marker)
                return jobs
            return [await self._poster.post(posting, raw) for posting, raw in chunk]  # keys decide, one by one
        raise BackendUnavailable(f"a chunk of {len(chunk)} jobs was lost {RACE_RETRIES} times on its way "
                                 "(certainly not written); try again")

    async def _resolve(self, marker: Marker, chunk: list[Prepared]) -> bool:
        """Whether a chunk whose reply was lost was applied (as :meth:`Poster._resolve`)."""
        try:
            return await self._markers.applied(marker)
        except BackendUnavailable as error:
            if all(posting.key is not None for posting, _ in chunk):
                raise  # posting the batch again with its keys finds what was written
            raise UnknownOutcome(
                f"a chunk of {len(chunk)} jobs (from {chunk[0][0].name!r}): the reply to its post was lost and "
                f"ZooKeeper stayed unreachable, so whether it was posted cannot be told ({error}); "
                "post with keys to retry safely") from error


class BatchingBoard(JobBoard):
    """The ZooKeeper board's batch operations (a base class: board.py is at its size limit)."""

    _batches: BatchPoster

    async def post_many(self, jobs: Sequence[NewJob]) -> list[Job]:
        return await self._batches.post(self._check_batch(jobs))
