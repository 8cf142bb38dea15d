"""The ``jobboard`` command's entry point: for ``jobboard worker``, SIGTERM/SIGINT are
caught before anything heavy is imported (see :mod:`jobboard.early_signals`)."""

from __future__ import annotations

import sys


def main() -> int:
    if "worker" in sys.argv[1:]:
        from jobboard.early_signals import catch_early_signals

        catch_early_signals()
    from jobboard.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
