"""What every command module builds on: :class:`Command`, the exit statuses, :class:`CommandError`.

The CLI package imports downwards only: ``app`` (the parser and the command table) imports the
command modules (``jobs``, ``worker``, ``plan``, ...), which import ``command``, ``options`` and
``output``; none of these imports ``app``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from jobboard.board.checks import check_group, check_key, check_public_name
from jobboard.board.contract import JobBoard
from jobboard.errors import InvalidJob

PROG = "jobboard"

EXIT_OK, EXIT_NOT_MET, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_STATUSES = """exit statuses:
  0  ok
  1  the condition is not met (check: no live worker; result, wait: not finished
     or trashed; plan status: failed) or the command failed
  2  usage error (bad option or argument, bad board URL, no board given)
  3  the board is unreachable (retrying may help) or no installed backend serves its URL"""

BoardAction = Callable[[JobBoard, argparse.Namespace], Awaitable[int]]
"""Runs a command on the opened board; returns the exit status."""
LocalAction = Callable[[argparse.Namespace], int]
"""Runs a command that needs no board; returns the exit status."""


class CommandError(Exception):
    """A command's input is unusable (e.g. ``--details`` is not a JSON object)."""


class UsageError(CommandError):
    """Options that do not go together or a value out of range (exit status 2, like argparse's)."""


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


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (a free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port


def seconds(text: str, *, positive: bool = False) -> float:
    """An argparse type: a finite number of seconds, >= 0 (> 0 with ``positive``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"seconds must be a finite number {'> 0' if positive else '>= 0'}, "
                                         f"not {text}")
    return value


def group_text(text: str) -> str:
    """An argparse type: a flow-control group name the board accepts (a bad one is a usage error, exit 2)."""
    try:
        return check_group(text)
    except InvalidJob as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def job_name(text: str) -> str:
    """An argparse type: a job name an application may post (``jobboard.`` is the library's: exit 2)."""
    try:
        return check_public_name(text)
    except InvalidJob as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def key_text(text: str) -> str:
    """An argparse type: an idempotency key the board accepts (empty or too long: a usage error, exit 2)."""
    try:
        check_key("", text)
    except InvalidJob as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("job '': ")) from None
    return text


def whole_number(text: str, *, least: int = 0) -> int:
    """An argparse type: a whole number >= ``least``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}")
    return value


def positive_whole_number(text: str) -> int:
    """An argparse type: a whole number, 1 or more (a job's ``max_attempts``, a count)."""
    return whole_number(text, least=1)


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    return seconds(text, positive=True)


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without arguments."""


_NEGATIVE = re.compile(r"-\d")


def negative_values_attached(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``--older-than -1d`` as ``--older-than=-1d``: argparse takes a value starting with ``-`` and a
    digit for an option and says only "expected one argument"; attached, the option's own check
    names what is wrong with the value. Only options that take a value are joined (spelt in full,
    or abbreviated to a prefix of no other option), and nothing after ``--``."""
    options = dict(_long_options(parser))
    out: list[str] = []
    for index, token in enumerate(argv):
        if token == "--":
            return out + list(argv[index:])
        if out and _NEGATIVE.match(token) and _takes_value(out[-1], options):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _takes_value(token: str, options: dict[str, bool]) -> bool:
    """Whether ``token`` names one long option (in full or by a unique prefix) that takes a value."""
    if not token.startswith("--") or "=" in token:
        return False
    if token in options:
        return options[token]
    matches = {option for option in options if option.startswith(token)}
    return len(matches) == 1 and options[matches.pop()]


def _long_options(parser: argparse.ArgumentParser) -> Iterator[tuple[str, bool]]:
    """The long option strings of ``parser`` and its subcommands, each with whether it takes one value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _long_options(sub)
        elif action.option_strings:  # flags have nargs=0, options with one value nargs=None
            yield from ((option, action.nargs is None) for option in action.option_strings
                        if option.startswith("--"))
