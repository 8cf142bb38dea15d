"""Workers: a handler registry, results, Retry, dead-lettering and a graceful stop.

Run it with ``python docs/examples/worker.py``.
"""

from __future__ import annotations

import anyio

from jobboard import Handlers, JobContext, JobState, Retry, Worker, WorkerConfig, open_board

handlers = Handlers()


@handlers.register("resize")
async def resize(ctx: JobContext) -> dict[str, object]:
    await anyio.sleep(0.01)  # the real work
    return {"image": ctx.details["image"], "width": ctx.details["width"]}


@handlers.register("upload")
async def upload(ctx: JobContext) -> str:
    if ctx.attempt == 1:
        raise Retry(0.2, "storage busy")  # back on the board, claimable again in 0.2 s
    resized = ctx.dependency_results[0]
    return f"uploaded {resized['image']} at {resized['width']}px"


@handlers.register("parse")
async def parse(ctx: JobContext) -> None:
    raise ValueError(f"{ctx.details['file']} is not CSV")  # every attempt fails


async def main() -> None:
    async with open_board("memory://worker-example") as board:
        resized = await board.post("resize", {"image": "cat.png", "width": 64})
        uploaded = await board.post("upload", depends_on=[resized], keep_result=True)
        broken = await board.post("parse", {"file": "notes.txt"}, max_attempts=2)

        worker = Worker(board, handlers, WorkerConfig(owner="worker-1", concurrency=2))
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await worker.started.wait()
            print("registered:", [entity.name for entity in await board.entities()])
            outcome = await board.wait_for_completion(uploaded)
            trashed = await board.wait_for_completion(broken)
            worker.stop()  # stop claiming; running jobs get the grace period

        print("upload:", outcome.state.value, "-", outcome.result)
        assert trashed.reason is not None
        print("parse:", trashed.state.value, "-", trashed.reason.splitlines()[0])
        print("stats:", f"consumed={worker.stats.consumed}", f"abandoned={worker.stats.abandoned}",
              f"trashed={worker.stats.trashed}", f"lost={worker.stats.lost}")
        print("after stop:", [entity.name for entity in await board.entities()],
              (await board.state(resized)) is JobState.COMPLETE)


if __name__ == "__main__":
    anyio.run(main)
