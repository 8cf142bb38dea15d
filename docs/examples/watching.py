"""Watching a board: ``wait()`` woken by a post from another task, the ``events()`` stream
(with the ``DROPPED`` notice a slow reader gets), and live entities.

Run it with ``python docs/examples/watching.py``.
"""



from __future__ import annotations

import anyio

from jobboard import EventKind, JobBoard, open_board

URL = "memory://watching"


async def wake_a_waiting_worker(worker: JobBoard, producer: JobBoard) -> None:
    """wait() has no timeout of its own: bound it with anyio.fail_after or move_on_after."""

    async def idle_worker() -> None:
        with anyio.fail_after(5):
            jobs = await worker.wait()  # returns once a claimable job exists
        print(f"wait() woke up: {[job.name for job in jobs]}")

    async with anyio.create_task_group() as group:
        group.start_soon(idle_worker)
        await anyio.sleep(0.1)  # the worker is waiting now
        await producer.post("send-mail", {"to": "ops@example.org"})
    claim = await worker.claim_next("worker-1")
    assert claim is not None
    await worker.consume(claim)


async def follow_events(watcher: JobBoard, producer: JobBoard) -> None:
    """A stream sees every board's work from the moment it is created."""
    async with watcher.events() as stream:
        job = await producer.post("resize", {"image": "a.png"})
        claim = await producer.claim(job, "worker-1")
        await producer.consume(claim)
        for _ in range(3):
            event = await anext(stream)
            print(f"event: {event.kind.value} {event.job_id} {event.detail}")


async def slow_reader(board: JobBoard) -> None:
    """A stream buffers at most maxlen events; a reader that falls behind is told how many it lost."""
    async with board.events(maxlen=3) as stream:
        for index in range(10):
            await board.post("tick", {"n": index})
        dropped = await anext(stream)
        assert dropped.kind is EventKind.DROPPED
        print(f"event: {dropped.kind.value}, count {dropped.count}")
        rest = [await anext(stream) for _ in range(3)]
        print(f"then: {[(event.kind.value, event.job_id) for event in rest]}")


async def entities(producer: JobBoard) -> None:
    """Entities announce live participants; they go away with the board that registered them."""
    async with open_board(URL) as worker:
        await worker.register_entity("worker-7", {"host": "build-3", "pid": 4242})
        print(f"entities: {[(e.name, dict(e.metadata)) for e in await producer.entities()]}")
    print(f"entities after the worker's board closed: {await producer.entities()}")


async def main() -> None:
    async with open_board(URL) as producer, open_board(URL) as worker:
        await wake_a_waiting_worker(worker, producer)
        await follow_events(worker, producer)
        await slow_reader(producer)
        await entities(producer)


if __name__ == "__main__":
    anyio.run(main)
