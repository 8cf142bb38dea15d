"""Where a spread board's posts go and how each is written (the routing: :mod:`.backend`'s docstring).

One call in one partition for most posts, as on one slot; a post with dependencies in other partitions is
linked after it (:mod:`.links`); a keyed post whose key's record is in another partition than its group's goes
through the record (:mod:`.keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jobboard.backend import Prepared
from jobboard.errors import BackendUnavailable, DependencyMissing
from jobboard.job import Job
from jobboard_redis.board import RedisBackend
from jobboard_redis.spread.flow import group_index
from jobboard_redis.spread.keys import ROUNDS, Keys
from jobboard_redis.spread.links import Forwarder

__all__ = ["Posts"]


class Posts:
    """The posts of a spread board over ``parts`` whose home partition is ``home`` (``exact``: plain posts go to
    each partition in turn); ``part_of`` names a job's partition."""

    def __init__(self, parts: Sequence[RedisBackend], part_of: Callable[[str], RedisBackend], links: Forwarder,
                 keys: Keys, *, home: int = 0, exact: bool = False) -> None:
        self.parts, self.part_of, self.links, self.keys = parts, part_of, links, keys
        self.turn = self.home = home
        self.exact = exact

    def next_plain(self) -> int:
        """The partition of the next plain post: home, or (``order=exact``) each in turn."""
        if not self.exact:
            return self.home
        self.turn = (self.turn + 1) % len(self.parts)
        return self.turn

    def index_of(self, prepared: Prepared, plain: int) -> int:
        """Where ``prepared`` goes (``plain``: for a job without group, key or dependencies)."""
        posting = prepared.posting
        if posting.group:
            return group_index(posting.group, len(self.parts))
        if posting.key is not None:
            return self.keys.index_of(posting.key)
        if posting.depends_on:
            return self.parts.index(self.part_of(posting.depends_on[0]))
        return plain

    def linked_elsewhere(self, prepared: Prepared, index: int) -> bool:
        """Whether a dependency of ``prepared`` is in another partition than ``index``."""
        return any(self.part_of(dep) is not self.parts[index] for dep in prepared.posting.depends_on)

    def keyed_elsewhere(self, prepared: Prepared, index: int) -> bool:
        """Whether ``prepared`` (bound for ``index``) is keyed, its key's record in another partition (only a
        grouped post's can be: an ungrouped keyed one goes to its key's)."""
        posting = prepared.posting
        return posting.key is not None and posting.group is not None and self.keys.index_of(posting.key) != index

    def alone(self, prepared: Prepared, index: int) -> bool:
        """Whether ``prepared`` (bound for ``index``) takes calls of its own: linked, or keyed, elsewhere."""
        return self.linked_elsewhere(prepared, index) or self.keyed_elsewhere(prepared, index)

    async def post(self, prepared: Prepared) -> Job:
        """:raises DependencyMissing, BackendUnavailable, UnknownOutcome: as the board's ``post``."""
        return await self.post_at(self.index_of(prepared, self.next_plain()), prepared)

    async def post_at(self, index: int, prepared: Prepared) -> Job:
        """Post ``prepared`` in partition ``index``: keyed for another partition, through the key's record there
        (:mod:`.keys`); else one call (and links), a record naming a job elsewhere answering that job (or, once
        nothing of that job is left, removed and the post made again).

        :raises BackendUnavailable: also when the key's record kept naming jobs gone (posting again is safe)."""
        part, key = self.parts[index], prepared.posting.key
        if self.keyed_elsewhere(prepared, index):
            return await self.keys.post_elsewhere(part, prepared)
        for _ in range(ROUNDS):
            if self.linked_elsewhere(prepared, index):
                job = await self.links.post_linked(part, prepared)
            else:
                job = await part.post(prepared)
            if key is None or self.part_of(job.id) is part:
                return job
            if (found := await self.keys.resolve(part, key, job.id)) is not None:
                return found
        raise BackendUnavailable(f"post of {prepared.posting.name!r}: its key's job kept going ({ROUNDS} rounds); "
                                 "post again")

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        """Runs of consecutive postings bound for one partition, one partition's ``post_many`` each: atomic
        per call as on one slot, in order; a missing dependency stops the batch there. A posting linked or keyed
        elsewhere is posted alone (:meth:`post_at`)."""
        jobs: list[Job] = []
        start, plain = 0, self.next_plain()
        while start < len(batch):
            index = self.index_of(batch[start], plain)
            if self.alone(batch[start], index):
                try:
                    jobs.append(await self.post_at(index, batch[start]))
                except DependencyMissing as error:
                    raise error.in_batch(start, jobs) from None
                start += 1
                continue
            end = start + 1
            while end < len(batch) and self.index_of(batch[end], plain) == index and not self.alone(batch[end], index):
                end += 1
            try:
                posted = await self.parts[index].post_many(batch[start:end])
            except DependencyMissing as error:
                at = start + (error.index or 0)
                message = str(error).split(": ", 1)[-1]
                raise DependencyMissing(f"jobs[{at}]: {message}", index=at, posted=[*jobs, *error.posted]) from None
            for offset, job in enumerate(posted):  # a key's record naming a job elsewhere: that job
                if self.part_of(job.id) is not self.parts[index]:
                    again = batch[start + offset]
                    found = await self.keys.resolve(self.parts[index], again.posting.key or "", job.id)
                    posted[offset] = found if found is not None else await self.post_at(index, again)
            jobs += posted
            start = end
        return jobs
