"""The ``jobboard`` command's entry point: for ``jobboard worker``, SIGTERM/SIGINT are
caught before anything heavy is imported (see :mod:`jobboard.worker.early_signals`)."""

from __future__ import annotations

import sys


def main() -> int:
    worker = "worker" in sys.argv[1:]
    if worker:
        from jobboard.worker.early_signals import catch_early_signals

        catch_early_signals()
    from jobboard.cli import main as cli_main

    status = cli_main()
    if worker:  # a plain def handler's thread must not hold the process (see jobboard.cli.threads_at_exit)
        from jobboard.cli.threads_at_exit import exit_without_waiting

        exit_without_waiting(status)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
