"""redis://: a session the server lost (expired while paused, lost at a failover or a restart without
persistence) is replaced at once, once for all callers, never half-way, never after the board closed."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from jobboard import ClaimLost, EventKind, JobBoardError, NewJob, open_board
from jobboard_redis import RedisBackend, RedisBoard
from jobboard_redis.session import Session

pytestmark = pytest.mark.timeout(60)


def board_url(base: str, session_timeout: float = 10.0, **options: Any) -> str:
    query = "&".join(f"{key}={value}" for key, value in {"session_timeout": session_timeout, **options}.items())
    return f"{base}/0/sessions-{uuid.uuid4().hex}?{query}"


async def test_a_claim_refused_for_a_session_the_server_lost_replaces_it_at_once(redis_url: str) -> None:
    """As after a failover whose new primary never heard of (or already expired) this board's session."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url, session_timeout=10)) as board, board.events() as stream:
            assert isinstance(board.backend, RedisBackend)
            held = await board.claim(await board.post("held"), "w")
            free = await board.post("free")
            lost = board.backend.session.id
            await board.backend.client.command("ZREM", f"{board.backend.options.prefix}sessions", lost)
            claim = await board.claim_next("w")  # not BackendUnavailable until the next heartbeat
            assert claim is not None and claim.job.id == held.job.id  # released with the lost session
            assert board.backend.session.id != lost and await board.owner(free) is None
            assert (await board.watch_claim(held)) == "claimed again"
            with pytest.raises(ClaimLost):
                await board.consume(held, "late")  # the lost session's claim is fenced
            while (await anext(stream)).kind is not EventKind.SESSION_EXPIRED:
                pass  # the released claim's event may come first
            await board.consume(claim, "done")


async def test_concurrent_claims_refused_for_a_lost_session_replace_it_once(redis_url: str) -> None:
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url, session_timeout=10)) as board, board.events() as stream:
            assert isinstance(board.backend, RedisBackend)
            await board.post_many([NewJob("j", {"i": i}) for i in range(20)])
            await board.backend.client.command("ZREM", f"{board.backend.options.prefix}sessions", board.backend.session.id)
            claims = []

            async def take() -> None:
                claims.append(await board.claim_next("w"))

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(take)
            assert all(claims) and len({claim.job.id for claim in claims if claim}) == 20
            assert await board.backend.client.command("ZCARD", f"{board.backend.options.prefix}sessions") == 1
            expired = 0
            with anyio.move_on_after(0.3):
                while True:
                    expired += (await anext(stream)).kind is EventKind.SESSION_EXPIRED
            assert expired == 1


@contextlib.asynccontextmanager
async def lost_session(redis_url: str, close: Callable[[Session, Callable[[], Awaitable[list[object]]]],
                                                       Awaitable[list[object]]]) -> AsyncIterator[RedisBoard]:
    """A board holding a job whose session the server lost, and whose session's ``close`` is
    ``close(session, the real close)`` while the block runs."""
    with anyio.fail_after(30):
        async with open_board(board_url(redis_url, session_timeout=10)) as board:
            assert isinstance(board.backend, RedisBackend)
            await board.post("j")
            session, real = board.backend.session, board.backend.session.close
            await board.backend.client.command("ZREM", f"{board.backend.options.prefix}sessions", session.id)
            session.close = lambda: close(session, real)  # type: ignore[method-assign]
            try:
                yield board
            finally:
                session.close, session.stopped = real, False  # type: ignore[method-assign]


async def test_a_board_stopped_while_its_lost_session_is_replaced_starts_no_new_one(redis_url: str) -> None:
    async def close_then_stop(session: Session, close: Callable[[], Awaitable[list[object]]]) -> list[object]:
        events = await close()
        session.stopped = True  # as aclose() does, between the release and a new session
        return events

    async with lost_session(redis_url, close_then_stop) as board:
        with pytest.raises(JobBoardError, match="closed while its Redis session was being replaced"):
            await board.claim_next("w")
        assert await board.backend.client.command("ZCARD", f"{board.backend.options.prefix}sessions") == 0  # no orphan left


async def test_a_claim_cancelled_while_its_lost_session_is_replaced_leaves_a_session(redis_url: str) -> None:
    async def slow_close(_: Session, close: Callable[[], Awaitable[list[object]]]) -> list[object]:
        await anyio.sleep(0.2)
        return await close()

    async with lost_session(redis_url, slow_close) as board:
        with anyio.move_on_after(0.05):
            await board.claim_next("w")  # its caller gives up half-way through the replacement
        sessions = await board.backend.client.command("ZRANGE", f"{board.backend.options.prefix}sessions", 0, -1)
        assert sessions == [board.backend.session.id.encode()]
        assert await board.claim_next("w") is not None
