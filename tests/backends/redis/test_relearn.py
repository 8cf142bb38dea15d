"""redis://: what the board learns from a server is learned again from the server it talks to after
every reconnection (docs/backends/redis.md, "Across failovers"): its configuration, its replicas, and
where its event stream stands."""

from __future__ import annotations

import logging
import time
import uuid

import anyio
import pytest
import redis

from jobboard import EventKind, JobBoardError, open_board
from jobboard_redis import RedisBackend
from tests.support.localserver import HOST
from tests.support.redisserver import RedisServer

pytestmark = pytest.mark.timeout(90)


def strict_url(server: RedisServer) -> str:
    return f"{server.url('')}/0/relearn-{uuid.uuid4().hex}?durability=strict&session_timeout=2&connect_timeout=10"


def drop_board_connections(port: int) -> None:
    with redis.Redis(host=HOST, port=port) as admin:
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


async def test_a_strict_board_refuses_a_server_that_stopped_fsyncing_after_a_reconnection() -> None:
    with RedisServer(appendfsync="always") as server, anyio.fail_after(40):
        async with open_board(strict_url(server)) as board:
            await board.post("fsynced")
            with redis.Redis(host=HOST, port=server.port) as admin:
                admin.config_set("appendfsync", "everysec")
            drop_board_connections(server.port)
            with pytest.raises(JobBoardError, match="appendfsync everysec") as refused:
                await board.post("not fsynced")
            assert "\n" not in str(refused.value)
            with redis.Redis(host=HOST, port=server.port) as admin:
                admin.config_set("appendfsync", "always")
            await board.post("fsynced again")
            assert sorted([job.name async for job in board.iterjobs()]) == ["fsynced", "fsynced again"]


async def test_a_strict_board_waits_for_a_replica_that_came_and_writes_alone_once_it_left(
        caplog: pytest.LogCaptureFixture) -> None:
    with RedisServer(appendfsync="always") as primary, caplog.at_level(logging.WARNING), anyio.fail_after(60):
        async with open_board(strict_url(primary)) as board:
            assert isinstance(board.backend, RedisBackend)
            replication = board.backend.client.replication
            await board.post("alone")
            assert replication.replicas == 0
            with RedisServer(appendfsync="always", extra=["--replicaof", HOST, str(primary.port)]) as replica:
                deadline = time.monotonic() + 20
                while not replication.replicas:  # looked at again at most once a second, at a write
                    assert time.monotonic() < deadline, "the replica that came was never waited for"
                    await board.post("looking")
                    await anyio.sleep(0.2)
                await board.post("replicated")
                with redis.Redis(host=HOST, port=replica.port) as reader:
                    assert reader.dbsize() > 0
                await anyio.to_thread.run_sync(replica.kill)
            started = time.monotonic()
            await board.post("after the replica left")  # retried for the grace, then written alone
            took = time.monotonic() - started
    messages = [record.getMessage() for record in caplog.records]
    assert replication.replicas == 0
    assert took < replication.grace + 5, took
    assert any("has a replica again" in message for message in messages)
    assert sum("has no replica" in message for message in messages) == 2, messages


async def test_a_stream_rolled_back_by_a_restart_that_lost_writes_is_reported() -> None:
    with RedisServer(appendonly=False) as server, anyio.fail_after(40):
        url = f"{server.url('')}/0/rollback-{uuid.uuid4().hex}?session_timeout=2&connect_timeout=10"
        async with open_board(url) as board:
            stream = board.events()
            await board.post("lost with the server's memory")
            assert (await anext(stream)).kind is EventKind.POSTED
            await anyio.to_thread.run_sync(server.restart)
            kinds = []
            while EventKind.DROPPED not in kinds:
                event = await anext(stream)
                kinds.append(event.kind)
            assert "rolled back" in (event.detail or "")
            assert kinds[0] is EventKind.SUSPENDED and EventKind.RECONNECTED in kinds, kinds
            async with open_board(url) as other:
                waited = await board.post("after the restart")
                claim = await other.claim(waited, "w")
                await other.consume(claim)
                assert (await board.wait_for_completion(waited)) is not None
