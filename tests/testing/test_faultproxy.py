"""The fault proxy reads ZooKeeper frames: it can tell a post of a single job from other writes."""

from __future__ import annotations

import struct

from aiozk import protocol

from tests.support.faultproxy import single_create


def frame(*ops: object) -> bytes:
    multi = protocol.TransactionRequest()
    for op in ops:
        multi.add(op)
    body = multi.serialize(7)
    return struct.pack(">i", len(body)) + body


def create(path: str) -> object:
    return protocol.CreateRequest(path=path, data=b"posting", acl=[protocol.UNRESTRICTED_ACCESS], flags=0)


def test_a_multi_of_creates_led_by_a_job_is_a_post() -> None:
    assert single_create(frame(create("/r/jobs/2-1")))
    assert single_create(frame(create("/r/jobs/2-1"), create("/r/marks/ab-0000000001")))  # with its marker
    assert single_create(frame(create("/r/keys/k-x"), create("/r/jobs/2-1"), create("/r/marks/ab-1")))
    assert single_create(frame(create("/r/jobs/2-1"), create("/r/jobs/2-2"), create("/r/marks/ab-1")))  # a chunk


def test_other_writes_are_not() -> None:
    assert not single_create(frame(create("/r/waiting/2-2"), create("/r/jobs/2-1/2-2")))
    assert not single_create(frame(protocol.SetDataRequest(path="/r/jobs/2-1", data=b"", version=0),
                                   create("/r/locks/2-1")))
    assert not single_create(struct.pack(">iii", 8, 9, 4))  # a getData, too short for a multi
    assert not single_create(frame(create("/r/waiting/2-2"), create("/r/jobs/2-1/2-2"), create("/r/marks/ab-2")))
    assert not single_create(frame(protocol.CheckVersionRequest(path="/r/jobs/2-1", version=1),
                                   protocol.DeleteRequest(path="/r/jobs/2-1", version=-1),
                                   create("/r/marks/ab-3")))
