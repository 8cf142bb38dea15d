"""Plans: build a dependency plan, post it, run it on workers, wait, draw it.

Run it with ``python docs/examples/plans.py``.
"""

from __future__ import annotations

import anyio

from jobboard import Handlers, Plan, Worker, WorkerConfig, open_board, post_plan, to_mermaid

tasks = Handlers()


@tasks.task("fetch")
async def fetch(url: str) -> int:
    return len(url)  # pretend: the size of the page


@tasks.task("merge")
async def merge(label: str, *sizes: int) -> str:
    return f"{label}: {sum(sizes)} bytes from {len(sizes)} pages"


async def main() -> None:
    plan = Plan("crawl")
    pages = [plan.task("fetch", url, name=f"fetch {url}") for url in ("a.example", "bb.example")]
    plan.task("merge", "total", name="merge", after=pages)  # merge("total", size_a, size_b)

    async with open_board("memory://plans-example") as board:
        handle = await post_plan(board, plan)
        worker = Worker(board, tasks, WorkerConfig(concurrency=2))
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            outcome = await handle.wait()
            worker.stop()
        print("plan:", outcome.state)
        print("merge:", outcome.results["merge"])
        print(to_mermaid(handle.tasks, (await handle.status()).states))


if __name__ == "__main__":
    anyio.run(main)
