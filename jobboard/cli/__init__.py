"""The ``jobboard`` command line: a package whose modules import downwards only (see :mod:`.command`).

``main`` is imported lazily so that importing a piece (e.g. :mod:`jobboard.cli.plan` for the demo's
progress printer) does not load every command.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from jobboard.cli.app import main as app_main

    return app_main(argv)
