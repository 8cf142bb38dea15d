"""``redis://``: a job board on Redis, every state change one atomic script (``board.lua``).

Claims belong to this board's session (:mod:`jobboard_redis.session`); claimable work and lost claims
are told to this board alone (:mod:`jobboard_redis.notices`); events come from the board's stream, read
only while someone listens (:mod:`jobboard_redis.view`). The layout is in docs/backends/redis.md."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import replace
from typing import Any, ClassVar, cast

import anyio

from jobboard.backend import (
    Backend,
    Claim,
    Event,
    EventKind,
    Job,
    JobState,
    ListedJob,
    MalformedEntry,
    Outcome,
    Prepared,
    Settle,
    SettleAction,
    TrashedJob,
)
from jobboard.errors import BackendUnavailable, BoardClosed, JobBoardError, JobNotFound
from jobboard_redis.client import RedisClient
from jobboard_redis.flow import FlowingRedis, after_events
from jobboard_redis.notices import POLL, Notices
from jobboard_redis.options import parse_redis_url
from jobboard_redis.posting import post_batch, post_prepared
from jobboard_redis.reads import completion, job_state, lost_claim, read_listed, read_trashed
from jobboard_redis.records import (
    claim_refused,
    delay_ms,
    dependency_results,
    encode_error,
    jobs_of,
    posting_of,
    sequence_of,
    settle_refused,
    text,
)
from jobboard_redis.session import Session
from jobboard_redis.view import BoardView

logger = logging.getLogger(__name__)

READ_BATCH, PEEK_LIMIT = 256, 100


class RedisBackend(FlowingRedis):
    """A job board stored under one key prefix of one Redis database; see the module docstring."""

    _client: RedisClient  # set by open()
    spread: ClassVar[Callable[[str], Backend] | None] = None  # .spread.SpreadBackend, set by the package

    def __new__(cls, url: str = "", root: str | None = None) -> RedisBackend:  # noqa: PYI034 (not always a cls)
        """``?cluster=1&partitions=K`` (K > 1) makes a :attr:`spread` board instead."""
        if cls is RedisBackend and url and root is None and cls.spread and parse_redis_url(url).partitions > 1:
            return cast(RedisBackend, cls.spread(url))
        return super().__new__(cls)

    def __init__(self, url: str, root: str | None = None) -> None:
        """``root``: a partition of a spread board (:mod:`jobboard_redis.spread`), under its own hash tag."""
        super().__init__(url)
        options = parse_redis_url(url)
        self.options = replace(options, root=root, partitions=1) if root is not None else options
        self.use_options(self.options)
        self._retention_ms = str(int(self.key_retention * 1000))
        self._claims: dict[str, tuple[int, str]] = {}  # claims made here: job -> (generation, session)
        self.forward: Callable[[RedisBackend], Awaitable[None]] | None = None  # a partition's (spread.links)

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        client = self._client = RedisClient(self.options)
        try:
            await client.check_server()
            self.session = Session(client, self.options.session_timeout, self._on_session)
            self.view = BoardView(client, self.hub, self._spawn)
            self.notices = Notices(client, self.session, self.view, self._spawn)
            await self.session.open()
            self.view.server_offset_ms = self.session.server_offset_ms
        except BaseException:
            await client.close()
            raise
        self._open = True
        for work in (self.session.run(), self.session.watchdog(), self.retain_forever()):
            self._spawn(work)

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        self.view.notify()
        self.notices.wake_all()
        self.session.stopped = self.view.stopped = self.notices.stopped = True
        for task in (tasks := list(self.services.tasks)):
            task.cancel()
        if tasks:  # let them end before their connections close (bounded: a swallowed cancel)
            await asyncio.wait(tasks, timeout=1.0)
        try:
            with anyio.fail_after(min(self.options.retry_window, 2.0)):  # not an outage's length: the
                self.view.local(await self.session.close())                # server expires the session
        except (JobBoardError, TimeoutError) as error:
            logger.warning("%s: could not release the session at close (%s): the server expires it in %g s",
                           self.url, str(error) or "no answer", self.options.session_timeout)
        with anyio.move_on_after(2.0) as scope:
            await self._client.close()
        if scope.cancelled_caught:
            logger.warning("%s: closing the Redis connections took too long; abandoned", self.url)
        self.hub.close()

    @property
    def client(self) -> RedisClient:
        self.ensure_open()
        return self._client

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.services.spawn(work)

    def _on_session(self, change: str, events: list[object]) -> None:
        if change == "events":
            self.view.local(events)
        elif change == "expired":
            self.hub.publish(Event(EventKind.SESSION_EXPIRED, detail="Redis session lost: its claims are gone"))
            self.view.notify()
        elif change == "renewed":
            self.view.server_offset_ms = self.session.server_offset_ms
            self.notices.wake_all()  # registered under the old session: register again
            self._spawn(self._restore_entities())

    async def _call(self, op: str, nonce: str, *args: str | bytes | int, claim: tuple[str, str] | None = None,
                    held: set[str] | None = None) -> tuple[str, list[Any]]:
        """One operation of the board's function. ``claim``: (nonce, session) of the claims the call may make; if
        the call or its forwarding of a spread partition's outbox fails (cancelled, out of retries, a permanent
        error), they go back in the background (``unclaim``); ``held`` gains what they passed over. :raises BoardClosed:"""
        try:
            status, data, events = await self.client.call(op, nonce, *args)
            self.view.local(events)
            if len(events) % 4 and after_events(events, held) and self.forward is not None:  # the outbox has work
                await self.forward(self)
        except BaseException as error:  # cancelled, unavailable, or a permanent failure of the forwarding
            if claim is not None and self._open:
                self._spawn(self._unclaim(*claim))
            if isinstance(error, BackendUnavailable):
                self._raise_if_closed(op)
            raise
        return status, data

    def _raise_if_closed(self, op: str) -> None:
        """:raises BoardClosed: the board closed during ``op`` (for a caller handling a failure of it)."""
        if not self._open:
            raise BoardClosed(f"board {self.url} closed during {op}") from None

    async def post(self, prepared: Prepared) -> Job:
        return await post_prepared(self._call, prepared.posting, prepared.raw, self.options.nonce_ms)

    async def post_many(self, batch: Sequence[Prepared]) -> list[Job]:
        return await post_batch(self._call, [(prepared.posting, prepared.raw) for prepared in batch],
                                self.options.nonce_ms)

    # -- reading -------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return self.options.prefix + ":".join(parts)

    async def _jobs(self, ids: Sequence[str], *, only_unclaimed: bool = False) -> list[ListedJob]:
        """The jobs among ``ids`` still on the board; malformed ones are reported and set aside."""
        listed, malformed = await read_listed(self.client, ids, only_unclaimed=only_unclaimed)
        for job in malformed:
            await self._set_aside(job)
        return listed

    async def _set_aside(self, job: str) -> None:
        """Report a malformed entry and move it out of the board's indexes (it is kept)."""
        await self._call("quarantine", "", job)
        self.report_malformed(job)

    async def get(self, job_id: str) -> Job:
        for listed in await self._jobs([job_id]):
            return listed.job
        raise JobNotFound(f"job {job_id} is not on the board")

    async def iterjobs(self, only_unclaimed: bool) -> AsyncIterator[Job]:
        async for listed in self.listing(only_unclaimed):
            yield listed.job

    async def listing(self, only_unclaimed: bool) -> AsyncIterator[ListedJob]:
        ids = [text(job) for job in await self.client.command("ZRANGE", self._key("all"), 0, -1)]
        for start in range(0, len(ids), READ_BATCH):
            for listed in await self._jobs(ids[start:start + READ_BATCH], only_unclaimed=only_unclaimed):
                yield listed

    async def state(self, job_id: str) -> JobState:
        return await job_state(self.client, job_id)

    async def owner(self, job_id: str) -> str | None:
        state, owner = await self.client.command("HMGET", self._key("job", job_id), "st", "owner")
        return text(owner) if state == b"c" and owner else None

    async def job_count(self) -> int:
        return int(await self.client.command("ZCARD", self._key("all")))

    async def trashed(self) -> AsyncIterator[TrashedJob]:
        ids = [text(job) for job in await self.client.command("ZRANGE", self._key("trash"), 0, -1)]
        for start in range(0, len(ids), READ_BATCH):
            for job, item in await read_trashed(self.client, ids[start:start + READ_BATCH]):
                if item is None:
                    self.report_malformed(job, "not a valid trashed posting")
                else:
                    yield item

    # -- claiming ------------------------------------------------------------

    def _claim_of(self, owner: str, data: list[Any]) -> Claim:
        """:raises MalformedEntry: the claimed job's posting is not valid."""
        job_id, raw, attempts, generation, results = text(data[0]), data[1], data[2], int(data[3]), data[4]
        posting = posting_of(raw, attempts, None, data[5])
        job = posting.to_job(job_id, sequence_of(job_id))
        self._claims[job_id] = (generation, self.session.id)
        return Claim(job, owner, generation, dependency_results(posting, list(results)))

    async def _claim_read(self, owner: str, data: list[Any]) -> Claim | None:
        """The claim in a claiming op's ``data``; ``None`` if its posting is malformed (the job is set aside)."""
        try:
            return self._claim_of(owner, data)
        except MalformedEntry:
            await self._set_aside(text(data[0]))
            return None

    async def _claiming(self, op: str, owner: str, *rest: str) -> tuple[str, list[Any]]:
        """Call a claiming *op* (owner, session, retention, *rest) under this board's session; a session the
        server no longer has (expired, lost at a failover) is replaced at once and the call made once more;
        what its claims passed over is counted. :raises BackendUnavailable: refused still, or unreachable."""
        for _ in range(2):
            session, nonce, held = self.session.id, self._nonce(), set[str]()
            status, data = await self._call(op, nonce, owner, session, self._retention_ms, *rest,
                                            claim=(nonce, session), held=held)
            self._passed(held)
            if status != "nosession":
                return status, data
            try:
                await self.session.recover(session)
            except BackendUnavailable:
                self._raise_if_closed(op)
                raise
        raise BackendUnavailable("this board's Redis session is being renewed; retry")

    async def claim(self, job_id: str, owner: str) -> Claim:
        status, data = await self._claiming("claim", owner, job_id)
        if status != "ok":
            raise claim_refused(status, job_id, data)
        if (claim := await self._claim_read(owner, data)) is None:
            raise JobNotFound(f"job {job_id} is not a valid posting (set aside)")
        return claim

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        if names is not None and not names:
            return None
        for _ in range(100):
            status, data = await self._claiming("claim_next", owner, *sorted(names or ()))
            if status == "none":
                return None
            if status == "ok" and (claim := await self._claim_read(owner, data)) is not None:
                return claim  # else set aside, or a replayed claim whose job has moved on since: try again
        return None

    async def claim_many(self, owner: str, names: Collection[str] | None, count: int) -> list[Claim]:
        """One call (``claim_many`` in board.lua); a malformed job among them is set aside, not returned."""
        if names is not None and not names:
            return []
        status, rows = await self._claiming("claim_many", owner, str(count), *sorted(names or ()))
        with anyio.CancelScope(shield=True):  # a cancel in a set-aside would lose the claims read before it
            claims = [await self._claim_read(owner, row) for row in (rows if status == "ok" else ())]
        return [claim for claim in claims if claim is not None]

    async def watch_claim(self, claim: Claim) -> str:
        ours = self._claims.get(claim.job.id, (None,))[0] == claim.generation  # ended by another's call: told us
        with self.notices.watching() if ours else self.view.listening():  # another's claim: read from the stream
            return await self._watch(claim)

    async def claim_lost(self, claim: Claim) -> str | None:
        return await lost_claim(self.client, self._claims.get(claim.job.id), claim, self.session)

    async def _watch(self, claim: Claim) -> str:
        job = claim.job.id
        while True:
            if not self._open:
                return "board closed"
            signal = self.view.job_signal(job)
            try:
                reason = await lost_claim(self.client, self._claims.get(job), claim, self.session)
            except BoardClosed:
                return "board closed"
            except BackendUnavailable:  # fenced by the watchdog if it lasts
                with anyio.move_on_after(0.1):
                    await signal.wait()
                continue
            if reason is not None:
                return reason
            await signal.wait()

    # -- settling ------------------------------------------------------------

    async def settle(self, claim: Claim, settle: Settle) -> None:
        if settle.action is SettleAction.CONSUME:
            await self._settle_op("consume", claim, settle.encoded_result, self._retention_ms)
        elif settle.action is SettleAction.ABANDON:
            await self._settle_op("abandon", claim, delay_ms(settle.retry_after), encode_error(settle.error))
        else:
            await self._settle_op("trash", claim, settle.reason, self._retention_ms, encode_error(settle.error))

    async def release(self, claim: Claim) -> None:  # its attempt uncounted (``give_back`` in settle.lua)
        await self._settle_op("give_back", claim)

    async def _settle_op(self, op: str, claim: Claim, *args: str | bytes | int) -> None:
        status, _ = await self._call(op, self._nonce(), claim.job.id, str(claim.generation), claim.owner, *args,
                                     self.session.id)
        if status != "owner":
            self._forget(claim)  # settled, or lost for good: no longer this board's
        if status != "ok":
            raise settle_refused(status, claim.job.id, claim.owner)

    def _nonce(self) -> str:
        return self._client.nonce()

    def _forget(self, claim: Claim) -> None:
        if self._claims.get(claim.job.id, (None,))[0] == claim.generation:
            self._claims.pop(claim.job.id)

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        if names is not None and not names:
            await self.settle(claim, settle)
            return None
        session, claim_nonce, held = self.session.id, self._nonce(), set[str]()
        status, data = await self._call(
            "consume_next", self._nonce(), claim.job.id, str(claim.generation), claim.owner, settle.encoded_result,
            self._retention_ms, session, claim_nonce, *sorted(names or ()), claim=(claim_nonce, session), held=held)
        self._passed(held)
        if status in ("lost", "owner"):
            raise settle_refused(status, claim.job.id, claim.owner)
        self._forget(claim)
        if status == "ok" and (following := await self._claim_read(claim.owner, data)) is not None:
            return following
        return None if status == "none" else await self.claim_next(claim.owner, names)

    async def cancel(self, job_id: str, reason: str) -> None:
        status, data = await self._call("cancel", self._nonce(), job_id, reason, self._retention_ms)
        if status != "ok":
            raise claim_refused(status, job_id, data)

    # -- waiting -------------------------------------------------------------

    async def wait(self, names: Collection[str] | None) -> list[Job]:
        wanted = sorted(names) if names is not None else []
        with self.notices.waiting(names) as waiter:
            while True:
                self.ensure_open()
                waiter.event, wait_ms = anyio.Event(), -1.0
                if names is None or names:
                    _, (wait_ms, ids, rows) = await self._call("peek", "", PEEK_LIMIT, *self.notices.peek_args(),
                                                               *wanted)
                    jobs, malformed = jobs_of(ids, rows)
                    for job_id in malformed:
                        await self._set_aside(job_id)
                    if jobs:
                        self.notices.wake_more(len(jobs) - 1)
                        return jobs
                    wait_ms = min(POLL * 1000, int(wait_ms) if int(wait_ms) >= 0 else math.inf)
                with anyio.move_on_after(float(wait_ms) / 1000 + 0.001 if wait_ms >= 0 else math.inf):
                    await waiter.event.wait()

    async def wait_for_completion(self, job_id: str) -> Outcome:
        with self.view.listening():
            while True:
                self.ensure_open()
                signal = self.view.job_signal(job_id)
                outcome = await completion(self.client, job_id)
                if outcome is not None:
                    return outcome
                await signal.wait()

    def observed(self) -> None:
        self.view.listen()

    @property
    def events_decoded(self) -> int:
        """Stream entries and notices this board has decoded (``benchmarks.redis_fleet`` reads it)."""
        return self.view.decoded + self.notices.received

