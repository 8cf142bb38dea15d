"""The board's ``claim_next``, consume and ``consume_and_claim_next``, coalesced per process.

Each call is a request to the board's :class:`~jobboard_postgresql.coalescing.Coalescer`: concurrent
calls share one ``jb.cycle`` statement, each consume fenced by its own claim, each caller told its own
outcome (``ClaimLost`` / ``NotOwner``, or its claim). A caller cancelled before its request was sent
withdraws it (nothing happened). One cancelled after: a consume was applied or not (as after a lost
reply); a claim made for it is given back (``jb.unclaim``, attempt uncounted) before the cancel goes
through, so once a cancelled claim has returned its job is claimable and no claim of it lands later.
That wait is bounded by the statement's call (``Database.run``: the retry window plus one client-side
deadline, across a partition too); it is not cut when the session is lost, since a retry after the
renewal claims under the new session, which nobody would reap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection

import anyio

from jobboard.backend import Claim, MalformedEntry, Settle
from jobboard_postgresql.coalescing import Answer, Coalescer, Request
from jobboard_postgresql.cycles import Cycles
from jobboard_postgresql.rows import claim_of
from jobboard_postgresql.waiting import Waiting
from jobboard_postgresql.writes import Writer, fenced, is_job_id

GiveBack = Callable[[int, int, str], Awaitable[None]]
"""``give_back(job id, generation, owner)``: a claim nobody took, made claimable again (errors logged)."""


async def given_back(giving_back: Awaitable[None]) -> None:
    """Run ``giving_back`` to its end although the caller is being cancelled (the cancel goes through after)."""
    settling = asyncio.ensure_future(giving_back)
    with anyio.CancelScope(shield=True):  # an anyio scope re-cancels every loop turn: not in here
        while not settling.done():  # a plain asyncio cancel comes once more at most: wait on
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(settling)


class Claiming:
    """The coalesced claims and consumes of one board; the coalescer and its statements are this object's."""

    def __init__(self, cycles: Cycles, waiting: Waiting, writer: Writer, give_back: GiveBack,
                 report_malformed: Callable[[str, str], None],
                 passed_over: Callable[[list[str]], None] = lambda whys: None) -> None:
        self.coalescer = Coalescer(cycles.send)
        self.waiting, self.writer, self.give_back, self.report_malformed = waiting, writer, give_back, report_malformed
        self.passed_over = passed_over
        """Told why the jobs a claim passed over were held back (``Backend.passed_over``)."""

    async def claim_next(self, owner: str, names: Collection[str] | None) -> Claim | None:
        """The best ready job's claim, or ``None``. Malformed rows taken on the way are set aside and reported."""
        while True:
            request = self.coalescer.submit(Request(owner, True, names=wanted(names)))
            claim, malformed = await self._taken(await self._answer(request), owner)
            if not malformed:
                return claim

    async def consume(self, claim: Claim, settle: Settle) -> None:
        """One fenced consume. :raises ClaimLost: / :raises NotOwner: nothing changed."""
        request = self.coalescer.submit(Request(claim.owner, False, consume=consumed(claim, settle)))
        try:
            answer = await request.future
        except asyncio.CancelledError:
            self.coalescer.withdraw(request)  # sent: applied or not, as after a lost reply
            raise
        finally:
            if request.sent:
                self.waiting.settled(claim.job.id)
        fence(claim, answer)

    async def consume_and_claim_next(self, claim: Claim, settle: Settle,
                                     names: Collection[str] | None) -> Claim | None:
        """The consume, then (if it was applied and the session lives) the next claim, in one transaction.
        :raises ClaimLost: / :raises NotOwner: nothing changed, nothing claimed."""
        request = self.coalescer.submit(Request(claim.owner, True, names=wanted(names),
                                                consume=consumed(claim, settle)))
        try:
            answer = await self._answer(request)
        finally:
            if request.sent:
                self.waiting.settled(claim.job.id)
        fence(claim, answer)
        self.waiting.work()
        self.waiting.outcome_signal.fire()
        taken, malformed = await self._taken(answer, claim.owner)
        return await self.claim_next(claim.owner, names) if malformed else taken

    async def _taken(self, answer: Answer, owner: str) -> tuple[Claim | None, bool]:
        """The answer's claim (recorded as held) or ``None``, and whether it took a malformed row (set aside)."""
        if answer.held:
            self.passed_over(answer.held.split(","))
        row = answer.row
        if row is None:
            return None, False
        try:
            claim = claim_of(row["r_id"], owner, row)
        except MalformedEntry:
            await self.writer.set_aside(row["r_id"])
            self.report_malformed(str(row["r_id"]), "not a valid posting")
            return None, True
        self.waiting.claimed(claim, answer.session)
        return claim, False

    async def _answer(self, request: Request) -> Answer:
        """The request's answer; a cancelled caller withdraws it, or waits for it and gives its claim back."""
        try:
            return await request.future
        except asyncio.CancelledError:
            if self.coalescer.withdraw(request):
                raise
            await given_back(self._give_back(request))
            raise

    async def _give_back(self, request: Request) -> None:
        await request.landed.wait()
        row = request.answer.row if request.answer is not None else None
        if row is not None:
            await self.give_back(row["r_id"], row["r_gen"], request.owner)

    async def close(self) -> None:
        await self.coalescer.close()


def wanted(names: Collection[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(names)


def consumed(claim: Claim, settle: Settle) -> tuple[int, int, bytes | None]:
    return int(claim.job.id) if is_job_id(claim.job.id) else 0, claim.generation, settle.encoded_result


def fence(claim: Claim, answer: Answer) -> None:
    """:raises ClaimLost: / :raises NotOwner: the consume's fence said so."""
    fenced(claim, {"r_status": answer.status, "r_detail": answer.detail})
