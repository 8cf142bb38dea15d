"""Claim-cycle throughput of kazoo's LockingQueue recipe (kazoo 2.11, ``kazoo.recipe.queue``).

    python -m benchmarks.peers.kazoo_queue --hosts 127.0.0.1:2181 --jobs 500 --workers 4 --repeat 3

Each run uses a fresh top-level path ``/bench-peers-kazoo-<hex>`` (the recipe's ``entries`` and ``taken``
children) and deletes it afterwards. The N items are put by ``--workers`` threads calling ``put`` (or, with
``--put-all``, by one ``put_all`` multi per 1000 items); then W consumer threads, each with its own
``LockingQueue`` instance, loop ``get(timeout=0.2)`` -> ``consume()`` until ``len(queue) == 0``.

By default the W consumers share one kazoo client (one session), like ``benchmarks.cycle`` shares one jobboard
session; ``--client-per-worker`` gives each consumer its own client.

Reported per run: post_per_s (puts per second); cycles_per_s from just before the first get to the last
consume; failed_claims (a ``taken`` lock create that lost the race, or a consume that found its lock gone);
zk_requests_per_job: requests in the consume phase per consumed job (every request a kazoo client queued, a
multi counting once, pings not counted) and their mix by kind; cpu_s of this process (all threads) during the
consume phase; left (entries still there afterwards, should be 0).
"""

from __future__ import annotations

import argparse
import threading
import time
from contextlib import ExitStack
from typing import Any

from kazoo.recipe.queue import LockingQueue

from benchmarks.peers.common import (
    ConsumePhase,
    RequestCounter,
    Stopwatch,
    Tally,
    kazoo_run_figures,
    make_parser,
    open_client,
    report,
    run_threads,
    unique_path,
)

GET_TIMEOUT = 0.2
PUT_ALL_BATCH = 1000
PUT_TIMEOUT = 300.0


def counting_lost_races(queue: Any, tally: Tally) -> Any:
    """Count every ``_take`` that got nothing: the lock node existed or the entry was gone."""
    take = queue._take

    def counted(id_: str) -> Any:
        taken = take(id_)
        if taken is None:
            tally.lost_race()
        return taken

    queue._take = counted
    return queue


def put_items(queue: Any, jobs: int, threads: int, put_all: bool) -> float:
    """Put ``jobs`` items; returns puts per second."""
    items = [b"%d" % index for index in range(jobs)]
    watch = Stopwatch()
    if put_all:
        for first in range(0, jobs, PUT_ALL_BATCH):
            queue.put_all(items[first:first + PUT_ALL_BATCH])
    else:
        def putter(first: int) -> None:
            for item in items[first::threads]:
                queue.put(item)

        run_threads([threading.Thread(target=putter, args=(first,), daemon=True) for first in range(threads)],
                    PUT_TIMEOUT)
    return jobs / watch.elapsed()


def consumer(queue: Any, tally: Tally, deadline: float, errors: list[str]) -> None:
    try:
        while time.monotonic() < deadline:
            if queue.get(timeout=GET_TIMEOUT) is None:
                if len(queue) == 0:
                    return
                continue
            if queue.consume():
                tally.consumed()
            else:
                tally.lost_race()
    except Exception as error:  # noqa: BLE001 - reported in the run's figures, not lost in a thread
        errors.append(repr(error))


def consume_phase(clients: list[Any], path: str, workers: int, timeout: float,
                  zk_pid: int | None = None) -> dict[str, Any]:
    tally, errors = Tally(), list[str]()
    deadline = time.monotonic() + timeout
    queues = [counting_lost_races(LockingQueue(clients[index % len(clients)], path), tally)
              for index in range(workers)]
    threads = [threading.Thread(target=consumer, args=(queue, tally, deadline, errors), daemon=True)
               for queue in queues]
    phase = ConsumePhase(zk_pid)
    stuck = run_threads(threads, timeout + 5)
    phase.stop()
    return {**phase.figures(tally), "errors": errors, "stuck_threads": stuck}


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    root = unique_path("kazoo")
    counter = RequestCounter()
    with ExitStack() as stack:
        producer = open_client(stack, args.hosts, counter)
        stack.callback(producer.delete, root, recursive=True)
        clients = [producer]
        if args.client_per_worker:
            clients = [open_client(stack, args.hosts, counter) for _ in range(args.workers)]
        queue = LockingQueue(producer, root)
        queue._ensure_paths()
        counter.take()
        posts_per_s = put_items(queue, args.jobs, args.workers, args.put_all)
        post_requests = counter.take()
        phase = consume_phase(clients, root, args.workers, args.timeout, args.zk_pid)
        requests = counter.take()
        left = len(queue)
    return kazoo_run_figures(posts_per_s, phase, requests, post_requests, args.jobs, left)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = make_parser((__doc__ or "").split("\n\n")[0])
    parser.add_argument("--put-all", action="store_true", help="put the items with put_all multis")
    parser.add_argument("--client-per-worker", action="store_true",
                        help="one kazoo client per consumer instead of one shared client")
    args = parser.parse_args(argv)
    runs = [one_run(args) for _ in range(args.repeat)]
    return report("cycle", "kazoo-lockingqueue", args, runs, put_all=args.put_all,
                  client_per_worker=args.client_per_worker)


if __name__ == "__main__":
    main()
