"""redis://'s event stream: what one write adds to it, and what every board reads out of it."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jobboard import ClaimLost, Event, EventKind, EventStream, NewJob, open_board
from jobboard_redis import RedisBackend

pytestmark = pytest.mark.timeout(60)


async def posted(stream: EventStream, count: int) -> list[tuple[str | None, str]]:
    found: list[Event] = []
    while len(found) < count:
        event = await anext(stream)
        if event.kind is EventKind.POSTED:
            found.append(event)
    return [(event.job_id, event.detail) for event in found]


async def test_a_post_many_run_of_one_name_is_one_stream_entry_and_one_event_per_job(redis_url: str) -> None:
    url = f"{redis_url}/0/events-{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as writer, open_board(url) as reader, \
                writer.events() as own, reader.events() as streamed:
            assert isinstance(writer.backend, RedisBackend)
            stream_key = writer.backend.options.prefix + "ev"
            before = await writer.backend.client.command("XLEN", stream_key)
            batch = [NewJob("same", {"i": i}) for i in range(50)] + [NewJob("other"), NewJob("same")]
            jobs = await writer.post_many(batch)
            assert await writer.backend.client.command("XLEN", stream_key) - before == 3  # same, other, same
            expected = [(job.id, job.name) for job in jobs]
            assert await posted(own, len(jobs)) == expected  # this board's own, from the script's reply
            assert await posted(streamed, len(jobs)) == expected  # another board's, from the stream
            assert [job.name for job in await reader.wait(names=["other"])] == ["other"]


def test_only_a_well_formed_bounded_run_is_expanded() -> None:
    from jobboard_redis.view import _run_of

    assert _run_of("7+3") == range(7, 10)
    assert _run_of("7+200") == range(7, 207)
    for foreign in ("7+", "+3", "a+3", "7+-3", "7+٣", "7+0", "7+1", "7+201", "7+99999", "7+3+1"):
        assert _run_of(foreign) is None, foreign


async def test_a_claim_from_before_a_wipe_cannot_settle_the_job_that_reuses_its_id(redis_url: str) -> None:
    """Redis restarted without persistence (or a failover that lost the claim): ids and generations
    start over, yet a claim made before must not settle the job that now has its id."""
    url = f"{redis_url}/0/wiped-{uuid.uuid4().hex}"
    with anyio.fail_after(30):
        async with open_board(url) as board:
            assert isinstance(board.backend, RedisBackend)
            stale = await board.claim(await board.post("a", {"v": "old"}), "w")
            keys = await board.backend.client.command("KEYS", board.backend.options.prefix.replace("{", "\\{").replace("}", "\\}")
                                              + "*")
            await board.backend.client.command("DEL", *keys)  # everything of the board, its session too
            fresh = await board.post("a", {"v": "new"}, keep_result=True)
            assert fresh.id == stale.job.id  # the premise: the id is reused
            taken = await board.claim(fresh, "w")  # the same owner
            assert taken.generation > stale.generation
            with pytest.raises(ClaimLost):
                await board.consume(stale, "stale result")
            await board.consume(taken, "fresh result")
            assert (await board.wait_for_completion(fresh)).result == "fresh result"
