"""What every command module builds on: :class:`Command`, the exit statuses, :class:`CommandError`.

The CLI package imports downwards only: ``app`` (the parser and the command table) imports the
command modules (``jobs``, ``worker``, ``plan``, ...), which import ``command``, ``options`` and
``output``; none of these imports ``app``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from jobboard.board import JobBoard

PROG = "jobboard"

EXIT_OK, EXIT_NOT_MET, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_STATUSES = """exit statuses:
  0  ok
  1  the condition is not met (check: no live worker; result, wait: not finished
     or trashed; plan status: failed) or the command failed
  2  usage error (bad option or argument, no board given)
  3  the board is unreachable (retrying may help) or no installed backend serves its URL"""

BoardAction = Callable[[JobBoard, argparse.Namespace], Awaitable[int]]
"""Runs a command on the opened board; returns the exit status."""
LocalAction = Callable[[argparse.Namespace], int]
"""Runs a command that needs no board; returns the exit status."""


class CommandError(Exception):
    """A command's input is unusable (e.g. ``--details`` is not a JSON object)."""


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its arguments and what runs it (exactly one of the actions)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    on_board: BoardAction | None = None
    local: LocalAction | None = None
    example: str = ""
    """Example command lines, one per line, shown at the end of the command's ``--help``."""


def examples_epilog(example: str) -> str | None:
    """The ``examples:`` section of a ``--help`` (``None`` if there is none)."""
    lines = [line.strip() for line in example.strip().splitlines() if line.strip()]
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) if lines else None


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without arguments."""
