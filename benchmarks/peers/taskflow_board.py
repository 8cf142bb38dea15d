"""Claim-cycle throughput of OpenStack TaskFlow's ZooKeeper jobboard (taskflow 6.5, kazoo 2.11).

    python -m benchmarks.peers.taskflow_board --hosts 127.0.0.1:2181 --jobs 500 --workers 4 --repeat 3

Each run uses a fresh top-level path ``/bench-peers-taskflow-<hex>`` (board at ``.../jobs``, TaskFlow's trash
at ``.../.trash``) and deletes it afterwards. ``--workers`` threads post the N jobs (``board.post``), then W
claimer threads each run TaskFlow's conductor pattern until no unclaimed job is left::

    for job in board.iterjobs(only_unclaimed=True):
        try: board.claim(job, who); board.consume(job, who); break
        except (UnclaimableJob, NotFound): failed_claims += 1

By default the W claimers share one board and so one kazoo client (one session), like ``benchmarks.cycle``
shares one jobboard session; ``--board-per-worker`` gives each claimer its own client and board, like W
conductors (each board then loads every job through its own children watch before the phase starts; all of
them still run in this one Python process, so at high W the GIL, not ZooKeeper, may be the limit).

Reported per run: post_per_s; cycles_per_s from just before the first claim to the last consume; failed_claims
(claims that lost a race); zk_requests_per_job: requests in the consume phase per consumed job (every request
a kazoo client queued, a multi counting once, pings not counted) and their mix by kind; post_requests_per_job
(posting, plus the boards' watches loading the jobs); cpu_s of this process (all threads) during the consume
phase; left (job znodes still there afterwards, should be 0).
"""

from __future__ import annotations

import argparse
import threading
import time
from contextlib import ExitStack
from typing import Any

from taskflow import exceptions as tf_exceptions
from taskflow.jobs.backends.impl_zookeeper import ZookeeperJobBoard

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

LOST_RACE = (tf_exceptions.UnclaimableJob, tf_exceptions.NotFound)
LOAD_TIMEOUT = 60.0


def open_board(stack: ExitStack, client: Any, path: str) -> Any:
    """A connected TaskFlow board on ``client``, closed by ``stack``."""
    board = ZookeeperJobBoard("bench", {"path": path}, client=client)
    board.connect()
    stack.callback(board.close)
    return board


def post_jobs(board: Any, jobs: int, threads: int) -> float:
    """Post ``jobs`` jobs from ``threads`` threads; returns posts per second."""
    def poster(first: int) -> None:
        for index in range(first, jobs, threads):
            board.post("bench", details={"i": index})

    watch = Stopwatch()
    run_threads([threading.Thread(target=poster, args=(first,), daemon=True) for first in range(threads)],
                LOAD_TIMEOUT * 5)
    return jobs / watch.elapsed()


def claim_one(board: Any, who: str, tally: Tally) -> bool:
    """One pass of the conductor loop: claim and consume the first unclaimed job; False if there was none."""
    for job in board.iterjobs(only_unclaimed=True):
        try:
            board.claim(job, who)
        except LOST_RACE:
            tally.lost_race()
            continue
        board.consume(job, who)
        tally.consumed()
        return True
    return False


def claimer(board: Any, who: str, tally: Tally, deadline: float, errors: list[str]) -> None:
    try:
        while time.monotonic() < deadline and claim_one(board, who, tally):
            pass
    except Exception as error:  # noqa: BLE001 - reported in the run's figures, not lost in a thread
        errors.append(f"{who}: {error!r}")


def wait_loaded(boards: list[Any], jobs: int) -> None:
    """Until every board's cache (filled by its children watch) holds all the jobs."""
    deadline = time.monotonic() + LOAD_TIMEOUT
    while any(board.job_count < jobs for board in boards):
        if time.monotonic() > deadline:
            raise TimeoutError(f"boards loaded only {[board.job_count for board in boards]} of {jobs} jobs")
        time.sleep(0.01)


def consume_phase(boards: list[Any], workers: int, timeout: float,
                  zk_pid: int | None = None) -> dict[str, Any]:
    tally, errors = Tally(), list[str]()
    deadline = time.monotonic() + timeout
    threads = [threading.Thread(target=claimer, daemon=True,
                                args=(boards[index % len(boards)], f"w{index}", tally, deadline, errors))
               for index in range(workers)]
    phase = ConsumePhase(zk_pid)
    stuck = run_threads(threads, timeout + 5)
    phase.stop()
    return {**phase.figures(tally), "errors": errors, "stuck_threads": stuck}


def jobs_left(client: Any, path: str) -> int:
    return sum(not child.endswith(ZookeeperJobBoard.LOCK_POSTFIX) for child in client.get_children(path))


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    root, counter = unique_path("taskflow"), RequestCounter()
    with ExitStack() as stack:
        client = open_client(stack, args.hosts, counter)
        stack.callback(client.delete, root, recursive=True)
        producer = open_board(stack, client, f"{root}/jobs")
        boards = [producer]
        if args.board_per_worker:
            boards = [open_board(stack, open_client(stack, args.hosts, counter), f"{root}/jobs")
                      for _ in range(args.workers)]
        counter.take()
        posts_per_s = post_jobs(producer, args.jobs, args.workers)
        wait_loaded(boards, args.jobs)
        post_requests = counter.take()
        phase = consume_phase(boards, args.workers, args.timeout, args.zk_pid)
        requests = counter.take()
        left = jobs_left(client, producer.path)
    return kazoo_run_figures(posts_per_s, phase, requests, post_requests, args.jobs, left)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = make_parser((__doc__ or "").split("\n\n")[0])
    parser.add_argument("--board-per-worker", action="store_true",
                        help="one kazoo client and board per claimer instead of one shared board")
    args = parser.parse_args(argv)
    runs = [one_run(args) for _ in range(args.repeat)]
    return report("cycle", "taskflow-zookeeper", args, runs, board_per_worker=args.board_per_worker)


if __name__ == "__main__":
    main()
