"""Options every ``jobboard`` command accepts, before or after its name (and a plan action's)."""

from __future__ import annotations

import argparse
import os
import urllib.parse
from pathlib import Path

URL_ENV = "JOBBOARD_URL"
BOARD_HELP = f"board URL, e.g. memory://name (default: ${URL_ENV}, else the default file board: see docs/cli.md)"
VERBOSE_HELP = "log debug messages, including the backend client library's"


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """``--board`` and ``-v`` on the top-level parser, with their defaults."""
    parser.add_argument("--board", metavar="URL", default=None, help=BOARD_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)


def shared_options() -> argparse.ArgumentParser:
    """A parent parser with ``--board`` and ``-v`` for subcommands: ``SUPPRESS`` keeps an
    option not given after the subcommand from clobbering the one given before it."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--board", metavar="URL", default=argparse.SUPPRESS, help=BOARD_HELP)
    shared.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    return shared


def default_board_file() -> Path:
    """Where the default board lives: ``$XDG_DATA_HOME/jobboard/jobs.db``, else ``~/.local/share/jobboard/jobs.db``."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "jobboard" / "jobs.db"


def default_board_url() -> str:
    """The URL of the default board (a ``sqlite://`` file board, made by the first command that may create a
    board: see :func:`for_command`). Nothing is made here.

    :raises OSError: its directory could not be made (a file stands in the way, or it is not writable).
    """
    path = default_board_file()
    parent = next(folder for folder in path.parents if folder.exists() or folder == folder.parent)
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise OSError(f"{parent} is not a writable directory")
    return f"sqlite://{path}"


CREATING_COMMANDS = frozenset({"post", "worker", "schedule", "dashboard", "metrics", "limit", "pause", "resume"})
"""The commands that may create the board they are given (they post, serve a board that work will come
to, or store a setting of the board: a limit or a pause set before the first post); the others (they read,
or change jobs already posted) open a ``sqlite://`` board with ``create=0``: a board that does not exist
is said so, nothing made."""


def for_command(command: str, url: str) -> str:
    """``url`` as ``command`` opens it (see :data:`CREATING_COMMANDS`); an explicit ``create=`` is kept."""
    query = urllib.parse.parse_qsl(url.partition("?")[2], keep_blank_values=True)
    if command in CREATING_COMMANDS or not url.startswith("sqlite:") or any(key == "create" for key, _ in query):
        return url
    return f"{url}{'&' if '?' in url else '?'}create=0"


def as_given(text: str, given: str, opened: str) -> str:
    """``text`` (a message, the board's URL) with the URL :func:`for_command` made (``opened``) put back as
    ``given``: the user sees the URL they gave, not the internal ``create=0``."""
    return text.replace(opened, given) if opened != given else text


def shown(args: argparse.Namespace, message: str) -> str:
    """``message`` as the user sees it: with the board URL they gave (``args.as_given``, set by the dispatch)."""
    fix = getattr(args, "as_given", None)
    return message if fix is None else str(fix(message))
