"""``python -m jobboard``: the command line (see :mod:`jobboard.cli`)."""

from __future__ import annotations

from jobboard.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
