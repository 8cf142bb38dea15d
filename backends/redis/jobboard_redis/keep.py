"""Progress of running jobs, retention, purge, requeue and entities on Redis (a base of ``RedisBackend``).

The scripts are in ``keep.lua``. Progress is a field pair of the job hash (``pg`` the
generation that reported it, ``pr`` the progress), shown only while that claim holds.
Kept results and trash entries are indexed by expiry in sorted sets (``kexp``/``texp``:
a job's own TTL, scored by the expiry; ``kdef``/``tdef``: the board's, scored by when they
were stored), and every open board runs a ``retain`` script now and then, which deletes
what expired by the server's clock, at most :data:`RETAIN_BATCH` per call.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from jobboard.backend import (
    Backend,
    MalformedEntry,
    decode_value,
    encode_value,
    progress_from,
    progress_record,
)
from jobboard.errors import BoardConflict, InvalidJob, JobBoardError, JobNotFound
from jobboard.job import Claim, Entity, Job, Progress
from jobboard_redis.client import RedisClient
from jobboard_redis.options import RedisOptions
from jobboard_redis.records import entities_of, settle_refused, text
from jobboard_redis.session import Session

logger = logging.getLogger(__name__)

RETAIN_BATCH = 500


def with_progress(job: Job, generation: Any, reported: Any, data: Any, state: Any) -> Job:
    """``job`` with the progress of its hash's ``pr`` field, if the current claim (``gen``, state ``c``)
    reported it (``pg``: the generation that did)."""
    if state != b"c" or not data or reported != generation:
        return job
    try:
        progress = progress_from(decode_value(data))
    except MalformedEntry:
        return job
    return job if progress is None else replace(job, progress=progress)


def retention_interval(result_ttl: float, trash_ttl: float) -> float:
    """Seconds between passes: a quarter of the shorter TTL, from 0.2 s to a minute."""
    ttls = [ttl for ttl in (result_ttl, trash_ttl) if ttl > 0]
    return min(60.0, max(0.2, min(ttls) / 4)) if ttls else 60.0


class KeepingRedis(Backend):
    """Progress, retention, purge, requeue and entities for :class:`~jobboard_redis.board.RedisBackend`."""

    options: RedisOptions
    _client: RedisClient  # the board's, set by its open()
    session: Session  # the board's, set by its open()

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._entities: dict[str, bytes] = {}  # registered here: restored on a new session

    @abc.abstractmethod
    async def _call(self, op: str, nonce: str, *args: str | bytes | int, claim: tuple[str, str] | None = None,
                    held: set[str] | None = None) -> tuple[str, list[Any]]:
        """Run one operation of the board's function library (the board's own)."""

    @abc.abstractmethod
    def _nonce(self) -> str:
        """A fresh nonce for a write (the board's own)."""

    async def _unclaim(self, nonce: str, session: str) -> None:
        """Give back a claim whose caller gave up before its reply, if it was made (``unclaim``)."""
        try:
            await self._call("unclaim", nonce, session)  # a RELEASED event names the job, if there was one
        except JobBoardError as error:  # the claim, if made, goes back when the session ends
            logger.warning("%s: could not release a claim given up before its reply: %s", self.url, error)

    async def retain_forever(self) -> None:
        """Collect expired results and trash entries while the board is open (a task of the board)."""
        interval = retention_interval(self.result_ttl, self.trash_ttl)
        while self.is_open:
            try:
                removed = await self.retain()
                if removed:
                    logger.info("collected %d expired results and trash entries", removed)
            except JobBoardError as error:
                logger.debug("retention pass skipped: %s", error)
            await asyncio.sleep(interval * random.uniform(0.9, 1.1))

    async def retain(self) -> int:
        """One collection pass (repeated while a batch is full); returns how many entries went."""
        removed = 0
        while True:
            _, data = await self._call("retain", "", round(self.result_ttl * 1000), round(self.trash_ttl * 1000),
                                       RETAIN_BATCH)
            count = int(data[0])
            removed += count
            if count < RETAIN_BATCH:
                return removed

    def could_be_job_id(self, job_id: str) -> bool:
        """Ids here are the board's sequence numbers, in decimal."""
        return job_id.isascii() and job_id.isdigit() and not job_id.startswith("0")

    async def never_posted(self, job_id: str) -> bool:
        """Past the board's sequence counter: one ``GET``."""
        if not self.could_be_job_id(job_id):
            return True
        last = await self._client.command("GET", self.options.prefix + "seq")
        return int(job_id) > int(last or 0)

    async def report_progress(self, claim: Claim, progress: Progress) -> None:
        data = encode_value(progress_record(progress), what="progress")
        status, _ = await self._call("progress", "", claim.job.id, str(claim.generation), claim.owner, data)
        if status != "ok":
            raise settle_refused(status, claim.job.id, claim.owner)

    async def purge(self, older_than: float) -> int:
        older_ms = round(older_than * 1000)
        removed = 0
        while True:
            _, data = await self._call("purge", "", older_ms, RETAIN_BATCH)
            removed += int(data[0])
            if int(data[0]) < RETAIN_BATCH:
                return removed

    async def requeue(self, job_id: str, reset_attempts: bool) -> Job:
        found = job_id
        status, data = await self._call("requeue", self._nonce(), found, "1" if reset_attempts else "0")
        if status == "notfound":
            raise JobNotFound(f"job {found} is not in the trash")
        if status == "waiting":
            raise InvalidJob(f"job {found} waits for {text(data[0])} dependencies whose result never came "
                             "(it was trashed with a dependency): post it again instead")
        if status != "ok":
            raise BoardConflict(f"requeueing job {found}: a job hash with its id is on the board already")
        return await self.get(found)

    # -- entities ------------------------------------------------------------

    async def register_entity(self, name: str, metadata: Mapping[str, Any], encoded: bytes) -> None:
        self._entities[name] = encoded
        await self._call("register", "", self.session.id, name, encoded)

    async def unregister_entity(self, name: str) -> None:
        self._entities.pop(name, None)
        await self._call("unregister", "", self.session.id, name)

    async def entities(self) -> list[Entity]:
        return entities_of(await self._client.command("HGETALL", self.options.prefix + "ents"))

    async def _restore_entities(self) -> None:
        """Register this board's entities again under its new session (after a replaced one)."""
        for name, metadata in list(self._entities.items()):
            try:
                await self._client.call("register", "", self.session.id, name, metadata)
            except Exception:
                logger.exception("could not restore entity %s on %s", name, self.url)
