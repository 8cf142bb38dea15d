"""Settling claims: abandon with ``retry_after``, trash with a reason, ``max_attempts``,
and what a stale claim (``ClaimLost``) or a claim naming the wrong owner (``NotOwner``) gets.

Run it with ``python docs/examples/settling.py``.
"""



from __future__ import annotations

import dataclasses

import anyio

from jobboard import ClaimLost, JobBoard, JobNotFound, NotClaimable, NotOwner, open_board

URL = "memory://settling"


async def abandon_and_retry(board: JobBoard) -> None:
    """A failed attempt goes back on the board, unclaimable for a while."""
    job = await board.post("fetch", {"url": "https://example.org/feed"})
    claim = await board.claim(job, "worker-1")
    await board.abandon(claim, retry_after=0.2)  # e.g. the server answered 503
    assert await board.claim_next("worker-2") is None  # still on the board, but delayed
    try:
        await board.claim(job, "worker-2")
    except NotClaimable as error:
        print(f"abandoned with retry_after: {error}")
    await anyio.sleep(0.3)
    retry = await board.claim_next("worker-2")
    assert retry is not None and retry.job.id == job.id
    print(f"retried: attempt {retry.attempt}, generation {claim.generation} -> {retry.generation}")
    await board.consume(retry)


async def trash_with_reason(board: JobBoard) -> None:
    """A job that can never succeed goes to the trash, with the reason kept."""
    job = await board.post("parse", {"path": "upload-17.csv"})
    claim = await board.claim(job, "worker-1")
    await board.trash(claim, "line 3: not CSV")
    print(f"trashed: state {(await board.state(job)).value}")


async def attempts_run_out(board: JobBoard) -> None:
    """A job may be handed out max_attempts times; the next claim moves it to the trash."""
    job = await board.post("flaky", max_attempts=2)
    for _ in range(2):
        await board.abandon(await board.claim(job, "worker-1"))
    try:
        await board.claim(job, "worker-1")
    except JobNotFound as error:
        print(f"third claim: {error}")


async def stale_claims() -> None:
    """Generations are fencing tokens: a claim that is no longer current cannot settle."""
    async with open_board(URL) as board:
        job = await board.post("report", {"month": "2024-05"})
        async with open_board(URL) as first:
            stale = await first.claim(job, "worker-1")
        # worker-1's board closed (as if its process died): the job went back on the board.
        current = await board.claim(job, "worker-2")
        print(f"reclaimed: generation {stale.generation} -> {current.generation}")
        try:
            await board.consume(stale, "late result")
        except ClaimLost as error:
            print(f"stale claim: ClaimLost: {error}")
        forged = dataclasses.replace(current, owner="worker-3")
        try:
            await board.consume(forged)
        except NotOwner as error:
            print(f"wrong owner: NotOwner: {error}")
        await board.consume(current, "on time")


async def main() -> None:
    async with open_board(URL) as board:
        await abandon_and_retry(board)
        await trash_with_reason(board)
        await attempts_run_out(board)
        async for item in board.trashed():  # oldest first
            print(f"in the trash: {item.job.name}: {item.reason}")
    await stale_claims()


if __name__ == "__main__":
    anyio.run(main)
