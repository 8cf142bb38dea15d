"""Quickstart: post jobs with priorities, list them in board order, claim the best one, consume it.

Run it with ``python docs/examples/quickstart.py``.
"""



from __future__ import annotations

import anyio

from jobboard import JobState, Priority, open_board


async def main() -> None:
    async with open_board("memory://quickstart") as board:
        # Priority is a Priority member, its name ("high") or its value (1).
        await board.post("cleanup", {"dir": "/tmp/scratch"}, priority=Priority.LOW)
        await board.post("resize", {"image": "a.png", "width": 128})
        await board.post("resize", {"image": "b.png", "width": 128}, priority="high")
        await board.post("resize", {"image": "c.png", "width": 128})

        # Board order: higher priority first, then posting order.
        async for job in board.iterjobs():
            print(f"listed: {job.id} {job.name} {job.priority.name.lower()} {dict(job.details)}")

        claim = await board.claim_next("worker-1")  # the best claimable job, or None
        assert claim is not None
        job = claim.job
        print(f"claimed: {job.details['image']} by {claim.owner}, attempt {claim.attempt}")
        print(f"state while claimed: {(await board.state(job)).value}, owner {await board.owner(job)}")

        await board.consume(claim, {"bytes": 2048})
        assert await board.state(job) is JobState.COMPLETE
        print(f"state after consume: {(await board.state(job)).value}")
        print(f"jobs left on the board: {await board.job_count()}")


if __name__ == "__main__":
    anyio.run(main)
