"""Linked jobs: ``depends_on``, the ``WAITING`` state, dependency results in ``depends_on``
order, ``wait_for_completion`` with ``keep_result``, and the trash cascade.

Run it with ``python docs/examples/linked_jobs.py``.
"""



from __future__ import annotations

import anyio

from jobboard import JobBoard, NotClaimable, open_board


async def merge_parts(board: JobBoard) -> None:
    """Three downloads, then a merge that needs all three results."""
    parts = [await board.post("download", {"part": n}) for n in (1, 2, 3)]
    # depends_on takes jobs or job ids; the results arrive in this order.
    merge = await board.post("merge", depends_on=[parts[2], parts[0], parts[1].id], keep_result=True)
    print(f"merge is {(await board.state(merge)).value}, depends on parts 3, 1, 2")
    try:
        await board.claim(merge, "worker-1")
    except NotClaimable as error:
        print(f"claiming it now: NotClaimable: {error}")

    for part in parts:  # consume in posting order: part 1, 2, 3
        claim = await board.claim(part, "worker-1")
        await board.consume(claim, f"part-{claim.job.details['part']}.bin")
    print(f"after the last dependency: {(await board.state(merge)).value}")

    async with anyio.create_task_group() as group:
        group.start_soon(run_merge, board)  # a worker, running while we wait
        outcome = await board.wait_for_completion(merge)
    print(f"wait_for_completion: {outcome.state.value}, result {outcome.result}")


async def run_merge(board: JobBoard) -> None:
    claim = await board.claim_next("worker-2")
    assert claim is not None and claim.job.name == "merge"
    print(f"dependency_results: {claim.dependency_results}")
    await anyio.sleep(0.05)  # merging...
    await board.consume(claim, {"file": "merged.bin", "parts": len(claim.dependency_results)})


async def cascade(board: JobBoard) -> None:
    """Trashing a job trashes every job that (transitively) depends on it."""
    extract = await board.post("extract", {"table": "orders"})
    transform = await board.post("transform", depends_on=[extract])
    load = await board.post("load", depends_on=[transform])
    await board.trash(await board.claim(extract, "worker-1"), "source table missing")
    for job in (extract, transform, load):
        print(f"{job.name}: {(await board.state(job)).value}")
    outcome = await board.wait_for_completion(load)
    print(f"load ended {outcome.state.value}: {outcome.reason}")


async def main() -> None:
    async with open_board("memory://linked-jobs") as board:
        await merge_parts(board)
        await cascade(board)


if __name__ == "__main__":
    anyio.run(main)
