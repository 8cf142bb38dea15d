"""EventHub / EventStream on their own: fan-out, bounded buffers, ending."""

from __future__ import annotations

import anyio
import pytest

from jobboard.board.events import Event, EventHub, EventKind, EventStream


def posted(job_id: str) -> Event:
    return Event(EventKind.POSTED, job_id, "resize")


async def drain(stream: EventStream) -> list[Event]:
    return [event async for event in stream]


async def test_fan_out_to_two_streams() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        first, second = hub.subscribe(), hub.subscribe()
        events = [posted("job-1"), Event(EventKind.CLAIMED, "job-1", "worker-1")]
        for event in events:
            hub.publish(event)
        hub.close()
        assert await drain(first) == events
        assert await drain(second) == events


async def test_a_stream_sees_only_what_was_published_after_it_subscribed() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        hub.publish(posted("job-1"))
        late = hub.subscribe()
        hub.publish(posted("job-2"))
        hub.close()
        assert await drain(late) == [posted("job-2")]


async def test_overflow_counts_drops_and_keeps_the_newest() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        slow, fast = hub.subscribe(maxlen=2), hub.subscribe(maxlen=10)
        events = [posted(f"job-{index}") for index in range(5)]
        for event in events:
            hub.publish(event)
        hub.close()
        dropped, *rest = await drain(slow)
        assert (dropped.kind, dropped.count) == (EventKind.DROPPED, 3)
        assert "3" in dropped.detail
        assert rest == events[-2:]
        assert await drain(fast) == events


async def test_drop_count_restarts_after_it_is_reported() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        stream = hub.subscribe(maxlen=1)
        for index in range(3):
            hub.publish(posted(f"job-{index}"))
        assert (await stream.__anext__()).count == 2
        assert await stream.__anext__() == posted("job-2")
        hub.publish(posted("job-3"))
        hub.publish(posted("job-4"))
        assert (await stream.__anext__()).count == 1
        assert await stream.__anext__() == posted("job-4")


async def test_a_waiting_reader_is_woken_by_a_publish() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        stream = hub.subscribe()
        received: list[Event] = []

        async def read_one() -> None:
            received.append(await stream.__anext__())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_one)
            await anyio.wait_all_tasks_blocked()
            hub.publish(posted("job-1"))
        assert received == [posted("job-1")]


async def test_aclose_ends_a_waiting_iteration_and_unsubscribes() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        stream, other = hub.subscribe(), hub.subscribe()
        received: list[list[Event]] = []

        async def read_all() -> None:
            received.append(await drain(stream))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_all)
            await anyio.wait_all_tasks_blocked()
            await stream.aclose()
        assert received == [[]]
        hub.publish(posted("job-1"))
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        hub.close()
        assert await drain(other) == [posted("job-1")]


async def test_async_with_closes_the_stream() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        async with hub.subscribe() as stream:
            hub.publish(posted("job-1"))
            assert await stream.__anext__() == posted("job-1")
        hub.publish(posted("job-2"))
        assert await drain(stream) == []


async def test_hub_close_drains_buffered_events_then_ends() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        stream = hub.subscribe()
        hub.publish(posted("job-1"))
        hub.publish(posted("job-2"))
        hub.close()
        hub.publish(posted("job-3"))
        assert await drain(stream) == [posted("job-1"), posted("job-2")]
        assert await drain(stream) == []


async def test_hub_close_wakes_a_waiting_reader() -> None:
    with anyio.fail_after(5):
        hub = EventHub()
        streams = [hub.subscribe(), hub.subscribe()]
        received: list[list[Event]] = []

        async def read_all(stream: EventStream) -> None:
            received.append(await drain(stream))

        async with anyio.create_task_group() as tasks:
            for stream in streams:
                tasks.start_soon(read_all, stream)
            await anyio.wait_all_tasks_blocked()
            hub.close()
        assert received == [[], []]
