"""The backend's own RESP client (jobboard_redis.client_wire) against a real server: replies in
order, a server that stops answering, a server that lost the board's function."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from jobboard import BackendUnavailable, JobState, NewJob, UnknownOutcome, open_board
from jobboard_redis import RedisBackend
from jobboard_redis.client_wire import (
    LINGER_BATCH,
    READ_BUFFER,
    WRITE_EVERY,
    ConnectionLost,
    NotSent,
    ServerError,
    Wire,
    connect,
)
from tests.support.redisserver import RedisServer
from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(60)


def counting_writes(wire: Wire) -> list[bytes]:
    """What the wire writes from now on, one entry per write to its transport."""
    assert wire.transport is not None
    writes: list[bytes] = []
    write = wire.transport.write

    def counted(data: Any) -> None:
        writes.append(bytes(data))
        write(data)

    wire.transport.write = counted  # type: ignore[method-assign]
    return writes


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


async def test_replies_come_back_in_order_errors_in_place(server: RedisServer) -> None:
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            key = f"k-{uuid.uuid4().hex}"
            # one loop iteration: 200 commands pipelined, their replies matched in order (HGET of a counter: an error)
            sent = [wire.send(("INCR", key) if index % 7 else ("HGET", key, "f")) for index in range(200)]
            replies = [await reply for reply in sent]
            assert replies[0] is None  # HGET before the key exists
            assert [reply for reply in replies if isinstance(reply, int)] == list(range(1, 172))
            errors = [index for index, reply in enumerate(replies)
                      if isinstance(reply, ServerError) and reply.code == "WRONGTYPE"]
            assert errors == list(range(7, 200, 7))
        finally:
            wire.close()
        with pytest.raises(ConnectionLost):
            await wire.send(("PING",))


async def test_a_busy_loop_iteration_writes_every_few_commands_at_once(server: RedisServer) -> None:
    """A command sent with nothing in flight goes out at once when the last read woke one caller at most (a
    lone caller pays no extra loop iteration; callers woken together are written together); then Redis starts on the first commands while the client still queues the rest (one
    write per loop iteration made the two take turns), and a command that cannot be encoded queues nothing."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            assert wire.transport is not None
            writes = counting_writes(wire)
            key = f"k-{uuid.uuid4().hex}"
            sent = [wire.send(("INCR", key))]
            assert len(writes) == 1  # nothing was in flight: written within the call
            sent += [wire.send(("INCR", key)) for _ in range(WRITE_EVERY)]
            assert len(writes) == 2  # already on its way, within this iteration
            with pytest.raises(TypeError):
                wire.send(("INCR", key, None))  # type: ignore[arg-type]
            sent += [wire.send(("INCR", key)) for _ in range(WRITE_EVERY + 1)]
            assert len(writes) == 3
            assert [await reply for reply in sent] == list(range(1, 2 * WRITE_EVERY + 3))
            assert len(writes) == 4  # the last command went out at the end of the iteration
            assert await wire.send(("INCR", key)) == 2 * WRITE_EVERY + 3
            written = len(writes)
            lone = wire.send(("INCR", key))  # nothing in flight, and the last read woke one caller: at once
            assert len(writes) == written + 1 and await lone == 2 * WRITE_EVERY + 4
        finally:
            wire.close()


async def test_callers_woken_together_are_written_together(server: RedisServer) -> None:
    """After a read that woke several callers, a command sent with nothing in flight waits for the end of
    the loop iteration (the others woken may send theirs in it: one write for all)."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            assert wire.transport is not None
            writes = counting_writes(wire)
            key = f"k-{uuid.uuid4().hex}"
            blocked = wire.send(("BLPOP", f"empty-{key}", 0.2))  # Redis answers the three after it, in one write
            sent = [blocked, *[wire.send(("INCR", key)) for _ in range(3)]]
            assert await asyncio.gather(*sent) == [None, 1, 2, 3]
            written = len(writes)
            after = wire.send(("INCR", key))
            assert len(writes) == written  # not yet: the read woke four callers
            assert await after == 4 and len(writes) == written + 1
        finally:
            wire.close()


async def test_with_linger_commands_sent_within_it_share_one_write(server: RedisServer) -> None:
    """``?linger=``: a command waits up to ``linger`` for others; those sent meanwhile, in later loop iterations
    (as a one-slot worker's settles come), go in the same write; :data:`LINGER_BATCH` queued go at once."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            assert wire.transport is not None
            writes = counting_writes(wire)
            wire.linger = 0.2
            key = f"k-{uuid.uuid4().hex}"
            started = time.monotonic()
            sent = []
            for _ in range(3):  # one a loop iteration
                sent.append(wire.send(("INCR", key)))
                await asyncio.sleep(0)
            assert not writes  # still waiting for others
            assert await asyncio.gather(*sent) == [1, 2, 3]
            waited = time.monotonic() - started
            assert len(writes) == 1 and writes[0].count(b"INCR") == 3 and 0.15 <= waited < 2, (writes, waited)
            many = [wire.send(("INCR", key)) for _ in range(LINGER_BATCH)]
            assert len(writes) == 2  # a full batch goes at once
            assert (await asyncio.gather(*many))[-1] == 3 + LINGER_BATCH
            asked = time.monotonic()
            urgent = wire.send(("INCR", key), now=True)  # a WAIT after a write that lingered already: no second wait
            assert await urgent == 4 + LINGER_BATCH and len(writes) == 3 and time.monotonic() - asked < 0.15
            wire.linger = 0.0
            assert await wire.send(("INCR", key)) == 5 + LINGER_BATCH and len(writes) == 4  # at once again
        finally:
            wire.close()


@pytest.mark.parametrize("linger", [0.0, 0.001])
async def test_callers_sending_at_random_moments_all_get_their_replies(server: RedisServer, linger: float) -> None:
    """No command is stranded by the write rules (lingering or not): 40 callers, each sending 30 commands with random pauses (none,
    a loop iteration, a few ms) between them, all answered, each caller's in order."""
    with anyio.fail_after(30):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            wire.linger = linger
            key = f"k-{uuid.uuid4().hex}"
            chance = random.Random(28)

            async def caller(index: int) -> list[int]:
                replies = []
                pauses = [chance.choice((None, 0.0, 0.002)) for _ in range(30)]
                for pause in pauses:
                    replies.append(await wire.send(("INCR", f"{key}:{index}")))
                    if pause is not None:
                        await asyncio.sleep(pause)
                return replies

            found = await asyncio.gather(*(caller(index) for index in range(40)))
            assert found == [list(range(1, 31))] * 40
        finally:
            wire.close()


async def test_a_reply_is_timed_from_its_send_not_from_the_last_reply(server: RedisServer) -> None:
    """A command sent after an idle spell gets ``timeout`` for its reply: the connection's check, armed
    by an earlier command, must not count the idle spell (it aborted a healthy connection)."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=2, connect_timeout=5, tls=None)
        try:
            assert await wire.send(("PING",)) == b"PONG"  # arms the check, due 2 s from now
            await asyncio.sleep(1.5)
            key = f"empty-{uuid.uuid4().hex}"
            assert await wire.send(("BLPOP", key, 1)) is None  # pending when the check fires; answered in 1 s
            assert wire.failed is None
        finally:
            wire.close()


async def test_replies_larger_than_the_read_buffer_arrive_whole(server: RedisServer) -> None:
    """Replies are read into one reused buffer: a reply several times its size, and many small ones
    read together, come back whole and in order."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        try:
            key = f"big-{uuid.uuid4().hex}"
            value = bytes(range(256)) * (5 * READ_BUFFER // 256 + 7)
            sent = [wire.send(("SET", key, value)), wire.send(("GET", key))]
            sent += [wire.send(("ECHO", f"{index}")) for index in range(300)] + [wire.send(("GET", key))]
            replies = [await reply for reply in sent]
            assert replies[:2] == [b"OK", value] and replies[-1] == value
            assert replies[2:-1] == [f"{index}".encode() for index in range(300)]
        finally:
            wire.close()


async def test_commands_sent_while_the_connection_closes_fail_unwritten(
        server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """Writes to a closing transport are dropped with asyncio's "socket.send() raised exception."
    warning from the fifth on; with a write every few commands one iteration made that many."""
    with anyio.fail_after(20):
        wire, _ = await connect("127.0.0.1", server.port, reply_timeout=5, connect_timeout=5, tls=None)
        assert wire.transport is not None
        wire.transport.close()  # closing: connection_lost is on its way
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            sent = [wire.send(("PING",)) for _ in range(8 * WRITE_EVERY)]
            for reply in sent:
                with pytest.raises(ConnectionLost):
                    await reply
        assert not [record for record in caplog.records if "socket.send()" in record.getMessage()]


async def test_a_stopped_server_times_out_and_the_board_recovers(server: RedisServer) -> None:
    url = f"{server.url('')}/0/stop-{uuid.uuid4().hex}?session_timeout=1&connect_timeout=1"
    with anyio.fail_after(40):
        async with open_board(url) as board:
            server.signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(UnknownOutcome):  # no reply within the window: not a hang
                    await board.post("while stopped")
                assert time.monotonic() - started < 10
            finally:
                server.signal(signal.SIGCONT)
            job = await board.post("after", key="after")  # reconnected: the board works again
            assert await board.state(job) is JobState.UNCLAIMED


async def test_a_server_that_lost_the_function_gets_it_again(server: RedisServer) -> None:
    url = f"{server.url('')}/0/fn-{uuid.uuid4().hex}?session_timeout=5"
    with anyio.fail_after(20):
        async with open_board(url) as board:
            assert isinstance(board.backend, RedisBackend)
            await board.post("before")
            await board.backend.client.command("FUNCTION", "FLUSH")  # as a server restarted empty would
            job = await board.post("after")
            claim = await board.claim(job, "me")
            await board.consume(claim)
            assert await board.job_count() == 1


async def test_a_server_that_does_not_speak_resp_is_one_clear_error() -> None:
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(10)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(http, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        with anyio.fail_after(20), pytest.raises(BackendUnavailable, match="not a Redis reply") as caught:
            async with open_board(f"redis://127.0.0.1:{port}/0/x?connect_timeout=1&session_timeout=1"):
                pass
        assert "\n" not in str(caught.value)
    finally:
        listener.close()


@pytest.mark.parametrize("operation", ["post", "post_many"])
async def test_a_post_never_sent_is_reported_not_written(server: RedisServer, operation: str) -> None:
    """Redis unreachable for the whole window, no attempt ever sent: certainly not written, so
    ``BackendUnavailable`` (retry), never ``UnknownOutcome`` (which would say it cannot be told)."""
    async with TcpProxy("127.0.0.1", server.port) as proxy:
        url = f"redis://{proxy.hosts}/0/unsent-{uuid.uuid4().hex}?session_timeout=2&connect_timeout=1"
        with anyio.fail_after(30):
            async with open_board(url) as board:
                await board.post("before")
                await proxy.aclose()  # the connection reset, and no new one accepted
                await anyio.sleep(0.2)
                with pytest.raises(BackendUnavailable, match="not written") as caught:
                    if operation == "post":
                        await board.post("unkeyed")
                    else:
                        await board.post_many([NewJob("unkeyed", {"i": i}) for i in range(3)])
                assert not isinstance(caught.value, UnknownOutcome)


async def test_a_batch_cut_off_after_its_first_call_is_not_reported_unwritten(server: RedisServer) -> None:
    """A later call of a batch never sent says nothing of the calls before it: the first 100 jobs
    were written, so an unkeyed batch is ``UnknownOutcome``, never "certainly not written"."""
    async with TcpProxy("127.0.0.1", server.port) as proxy:
        url = f"redis://{proxy.hosts}/0/cutoff-{uuid.uuid4().hex}?session_timeout=2&connect_timeout=1"
        with anyio.fail_after(30):
            async with open_board(url) as board:
                assert isinstance(board.backend, RedisBackend)
                parent = await board.post("parent")
                calls = 0
                script_call = board.backend._call

                async def cut_before_the_second(op: str, *args: Any, **options: Any) -> Any:
                    nonlocal calls
                    calls += op == "post_many"
                    if op == "post_many" and calls == 2:
                        await proxy.aclose()
                    return await script_call(op, *args, **options)

                board.backend._call = cut_before_the_second  # type: ignore[method-assign]
                batch = [NewJob("x", {"i": i}) for i in range(150)] + [NewJob("linked", depends_on=[parent])]
                with pytest.raises(UnknownOutcome, match="cannot be told"):
                    await board.post_many(batch)  # sent call by call (a linked posting)
    async with open_board(f"{server.url('')}/0/{url.split('/')[-1].split('?')[0]}") as direct:
        assert await direct.job_count() == 101  # the parent and the first call's 100


async def test_a_lost_wait_after_a_sent_write_is_not_taken_for_unsent(server: RedisServer) -> None:
    """durability=strict: the write went out and ran; a WAIT that finds the connection failed must
    not turn the write into 'never sent' (a retry would then post it twice)."""
    with anyio.fail_after(20):
        async with open_board(f"{server.url('')}/0/wait-{uuid.uuid4().hex}?session_timeout=2") as board:
            assert isinstance(board.backend, RedisBackend)
            client = board.backend.client
            await client.command("PING")

            async def wait_found_the_wire_failed(wire: Any) -> None:
                raise NotSent("connection closed")

            client.replication.strict = True
            client._replicated = wait_found_the_wire_failed  # type: ignore[method-assign]
            with pytest.raises(ConnectionLost) as caught:
                await client._fcall(keys=[client.prefix], args=["ping", ""])
            assert not isinstance(caught.value, NotSent)



async def test_a_database_number_the_server_lacks_is_a_wrong_url(redis_url: str) -> None:
    """A database number past the server's ``databases`` (seen by hand: exit 1, 'Redis error: ERR DB index is
    out of range') is a wrong URL: ``InvalidURL`` (the CLI's exit 2), in one line."""
    from jobboard.errors import InvalidURL

    with anyio.fail_after(20), pytest.raises(InvalidURL) as refused:
        async with open_board(f"{redis_url}/99/b?connect_timeout=2"):
            pass
    assert "database number" in str(refused.value) and "\n" not in str(refused.value)
