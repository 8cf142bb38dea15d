"""The README's main job: a producer and three workers sharing a ``memory://`` board.

Run it with ``python -m jobboard demo``. It posts thumbnail jobs (some urgent,
one that always fails, a report linked to every other job), runs three
in-process workers until the board is empty, and prints what happened.
"""

from __future__ import annotations

import random
from typing import Any

import anyio

from jobboard import Claim, JobBoard, JobState, Priority, open_board

BOARD_URL = "memory://demo"
IMAGES = 24


async def produce(board: JobBoard) -> list[str]:
    """Post the work: thumbnails, one poisoned job, and a report that depends on all."""
    posted = []
    for index in range(IMAGES):
        urgent = index % 8 == 0
        job = await board.post("thumbnail", {"image": f"img-{index:02d}.png", "size": 128},
                               priority=Priority.HIGH if urgent else Priority.NORMAL, max_attempts=3)
        posted.append(job.id)
    poisoned = await board.post("thumbnail", {"image": "corrupt.png", "size": 128}, max_attempts=3)
    report = await board.post("report", {"title": "thumbnails"}, depends_on=posted, keep_result=True)
    print(f"posted {IMAGES + 2} jobs: {IMAGES} thumbnails (3 urgent), 1 corrupt image, "
          f"1 report waiting on {len(posted)} of them ({(await board.state(report)).value})")
    return [*posted, poisoned.id, report.id]


async def handle(claim: Claim) -> Any:
    """Do one job (simulated); raise to fail it."""
    details = claim.job.details
    if claim.job.name == "report":
        pixels = sum(result["bytes"] for result in claim.dependency_results)
        return {"images": len(claim.dependency_results), "total_bytes": pixels}
    if details["image"] == "corrupt.png":
        raise ValueError("cannot decode corrupt.png")
    await anyio.sleep(random.uniform(0.005, 0.02))
    return {"image": details["image"], "bytes": 1000 + len(details["image"]) * details["size"]}


async def work(name: str, done: dict[str, list[str]]) -> None:
    """A worker: claim the best job, run it, settle it; stop when the board is empty."""
    async with open_board(BOARD_URL) as board:
        while await board.job_count():
            claim = await board.claim_next(name)
            if claim is None:
                with anyio.move_on_after(0.2):
                    await board.wait()
                continue
            try:
                result = await handle(claim)
            except ValueError as error:
                print(f"  {name}: {claim.job.details.get('image')} failed "
                      f"(attempt {claim.attempt}/{claim.job.max_attempts}): {error}")
                await board.abandon(claim, retry_after=0.05)
                continue
            await board.consume(claim, result)
            done.setdefault(name, []).append(claim.job.name)


async def run_demo() -> None:
    async with open_board(BOARD_URL) as board:
        job_ids = await produce(board)
        done: dict[str, list[str]] = {}
        with anyio.fail_after(30):
            async with anyio.create_task_group() as workers:
                for index in range(3):
                    workers.start_soon(work, f"worker-{index + 1}", done)
        for name, jobs in sorted(done.items()):
            print(f"{name} consumed {len(jobs)} jobs")
        outcome = await board.wait_for_completion(job_ids[-1])
        print(f"report: {outcome.state.value}, result {outcome.result}")
        trashed = [item async for item in board.trashed()]
        for item in trashed:
            print(f"trash: {item.job.details['image']}: {item.reason}")
        states = [await board.state(job) for job in job_ids]
        complete = states.count(JobState.COMPLETE)
        print(f"done: {complete} complete, {states.count(JobState.TRASHED)} trashed, "
              f"{await board.job_count()} left on the board")


def main() -> int:
    anyio.run(run_demo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
