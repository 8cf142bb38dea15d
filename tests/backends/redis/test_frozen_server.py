"""redis:// on one server FROZEN (SIGSTOP): a reply timeout below the session timeout (a quarter of it) must
neither declare the session lost early nor spin; and through Sentinels, a frozen primary failed over to its
replica must not cost the session.

A board with ``session_timeout=6`` (reply timeout 2 s) holds a claim while its server is stopped:

- for 2.5 s (less than the session timeout minus a heartbeat's interval): after SIGCONT the claim still
  holds, ``watch_claim`` did not return, the consume is accepted; the board opened a bounded number of
  connections meanwhile (each waits the reply timeout for a silent server; no busy loop);
- for the session timeout + 1.5 s: the session is declared lost (``watch_claim`` returns), but no earlier
  than the session timeout after the last heartbeat acknowledged could have been sent (at most a heartbeat
  interval before the SIGSTOP), and the board serves again after SIGCONT with a new session.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest
import redis

from jobboard import open_board
from jobboard.backend import Claim
from jobboard.board.contract import JobBoard
from jobboard.errors import ClaimLost, InvalidURL
from jobboard_redis.options import parse_redis_url
from tests.support.failover import SentinelGroup, until
from tests.support.redisserver import RedisServer

pytestmark = pytest.mark.timeout(90)
SESSION_TIMEOUT = 6.0
BEAT_EVERY = SESSION_TIMEOUT / 3
MAX_NEW_CONNECTIONS = 30
"""Connections a board may open while its server is frozen 2.5 s (three connections, each attempt waiting the
2 s reply timeout; a busy loop would open hundreds)."""


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def connections_received(server: RedisServer) -> int:
    with redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5) as admin:
        return int(admin.info("stats")["total_connections_received"])


async def frozen_for(server: RedisServer, board: JobBoard, claim: Claim, seconds: float) -> tuple[float, str | None]:
    """Stop the server ``seconds`` while watching ``claim``; return when it was declared lost after the
    SIGSTOP (``inf``: it was not) and what ``watch_claim`` said by the SIGCONT."""
    said: list[tuple[float, str]] = []

    async def watch() -> None:
        why = await board.watch_claim(claim)
        said.append((time.monotonic(), why))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        await anyio.sleep(0.1)
        frozen = time.monotonic()
        server.signal(signal.SIGSTOP)
        try:
            await anyio.sleep(seconds)
        finally:
            server.signal(signal.SIGCONT)
        tasks.cancel_scope.cancel()
    return (said[0][0] - frozen, said[0][1]) if said else (float("inf"), None)


async def test_a_server_frozen_shorter_than_the_session_costs_nothing(server: RedisServer) -> None:
    url = f"{server.url('')}/0/frozen-{uuid.uuid4().hex}?session_timeout={SESSION_TIMEOUT}"
    with anyio.fail_after(40):
        async with open_board(url) as board:
            claim = await board.claim(await board.post("x"), "w")
            before = connections_received(server)
            _, said = await frozen_for(server, board, claim, 2.5)
            await board.consume(claim)
            opened = connections_received(server) - before
            print(f"frozen 2.5 s: watch_claim {said!r}, {opened} connections opened meanwhile")
            assert said is None
            assert opened <= MAX_NEW_CONNECTIONS


async def test_a_server_frozen_past_the_session_loses_it_no_earlier_than_due(server: RedisServer) -> None:
    url = f"{server.url('')}/0/frozen-{uuid.uuid4().hex}?session_timeout={SESSION_TIMEOUT}"
    with anyio.fail_after(60):
        async with open_board(url) as board:
            claim = await board.claim(await board.post("x"), "w")
            lost_after, said = await frozen_for(server, board, claim, SESSION_TIMEOUT + 1.5)
            print(f"frozen {SESSION_TIMEOUT + 1.5} s: watch_claim {said!r} {lost_after:.2f} s after the SIGSTOP")
            assert said == "session expired"
            assert SESSION_TIMEOUT - BEAT_EVERY - 0.2 <= lost_after <= SESSION_TIMEOUT + 1.0
            with anyio.fail_after(SESSION_TIMEOUT + 5):  # serving again, with a new session
                again = await board.claim(await board.post("y"), "w")
                await board.consume(again)



async def test_a_frozen_primary_named_by_sentinels_costs_no_session() -> None:
    """Through Sentinels (``down-after-milliseconds`` 500): the primary SIGSTOPped while a board
    (``session_timeout=10``) holds claims; the Sentinels promote its replica; after ``session_timeout`` + 1.5 s
    the claims still hold (``watch_claim`` did not return) and are consumed; SIGCONT, and the board serves on."""
    with SentinelGroup() as group, anyio.fail_after(60):
        url = group.url(f"frozen-{uuid.uuid4().hex}", session_timeout=10)
        async with open_board(url) as board:
            claims = [await board.claim(await board.post("x"), "w") for _ in range(3)]
            said: list[str] = []

            async def watch(claim: Claim) -> None:
                said.append(await board.watch_claim(claim))

            frozen = group.primary()
            async with anyio.create_task_group() as tasks:
                for claim in claims:
                    tasks.start_soon(watch, claim)
                await anyio.sleep(0.1)
                started = time.monotonic()
                frozen.signal(signal.SIGSTOP)
                try:
                    await anyio.to_thread.run_sync(lambda: until(lambda: group.named_primary() != frozen.port,
                                                                 "the Sentinels' failover", 20))
                    promoted = time.monotonic() - started
                    post = await board.post("z")  # the first write answered after the SIGSTOP
                    back = time.monotonic() - started
                    await anyio.sleep(max(0.0, started + 11.5 - time.monotonic()))
                    lost, consumed = list(said), 0
                    for claim in claims:
                        with contextlib.suppress(ClaimLost):
                            await board.consume(claim)
                            consumed += 1
                finally:
                    frozen.signal(signal.SIGCONT)
                tasks.cancel_scope.cancel()
            print(f"frozen primary: Sentinels promoted its replica after {promoted:.1f} s; a post answered "
                  f"{back:.1f} s after the SIGSTOP; claims lost {len(lost)} of {len(claims)}, {consumed} consumed")
            assert lost == [], f"claims declared lost across a frozen primary failed over in {promoted:.1f} s: {lost}"
            assert consumed == len(claims)
            again = await board.claim(post, "w")
            await board.consume(again)


def test_the_reply_timeout_is_a_quarter_of_the_session_timeout_within_bounds_or_the_urls() -> None:
    def wait(query: str) -> float:
        return parse_redis_url(f"redis://127.0.0.1:6379/0/b?{query}").reply_wait

    assert [wait(f"session_timeout={timeout}") for timeout in (1, 2, 5, 10, 30)] == [1.0, 2.0, 2.0, 2.5, 7.5]
    assert wait("reply_timeout=0.5") == 0.5 and wait("session_timeout=10&reply_timeout=4") == 4.0


@pytest.mark.parametrize(("query", "why"), [
    ("reply_timeout=0", "at least 0.1"), ("reply_timeout=-1", "at least 0.1"), ("reply_timeout=abc", "a number"),
    ("reply_timeout=nan", "a number"), ("reply_timeout=0.01", "at least 0.1"),
    ("reply_timeout=11", r"at most session_timeout \(10\)"),
    ("session_timeout=4&reply_timeout=4.5", r"at most session_timeout \(4\)"),
])
def test_a_bad_reply_timeout_is_refused_in_one_line(query: str, why: str) -> None:
    with pytest.raises(InvalidURL, match=f"^bad value for option reply_timeout=.*{why}") as refused:
        parse_redis_url(f"redis://127.0.0.1:6379/0/b?{query}")
    assert "\n" not in str(refused.value)
    assert parse_redis_url("redis://127.0.0.1:6379/0/b?session_timeout=4&reply_timeout=4").reply_wait == 4.0
