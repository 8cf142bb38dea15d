"""``sqlite://`` URLs: the file, the board and the options (see docs/backends/sqlite.md).

``sqlite:///abs/path/jobs.db?board=shop`` names an absolute file, ``sqlite://./rel.db`` and
``sqlite://rel.db`` a file relative to the working directory. The board is ``default`` unless
``?board=`` names another: one file holds any number of boards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobboard.backend import (
    board_name,
    non_negative_float,
    parse_options,
    parse_url,
    positive_float,
    positive_int,
)
from jobboard.errors import InvalidURL

DEFAULT_BOARD = "default"
"""The board a URL without ``?board=`` names."""


def _synchronous(text: str) -> str:
    value = text.strip().upper()
    if value not in ("NORMAL", "FULL"):
        raise ValueError("must be normal or full")
    return value


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError("must be 0 or 1")
    return value in ("1", "true", "yes")


OPTIONS = {
    "board": board_name, "max_attempts": positive_int, "max_posting_bytes": positive_int,
    "key_retention": non_negative_float, "result_ttl": non_negative_float, "trash_ttl": non_negative_float,
    "session_timeout": positive_float, "poll_interval": positive_float, "reap_interval": positive_float,
    "busy_timeout": positive_float, "synchronous": _synchronous, "network_fs": _flag, "create": _flag,
}


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """What one ``sqlite://`` URL asks for (seconds for every duration)."""

    path: Path
    board: str = DEFAULT_BOARD
    session_timeout: float = 5.0
    """A session whose heartbeat is older than this is dead even if its lock is held (a stopped process)."""
    poll_interval: float = 1.0
    """The slow fallback poll of ``PRAGMA data_version`` of a waiting board."""
    reap_interval: float = 0.25
    """How often a board probes the other sessions' locks (a SIGKILLed owner's claims go back then)."""
    busy_timeout: float = 60.0
    """How long a write keeps retrying while the write lock is taken before ``BackendUnavailable``."""
    synchronous: str = "NORMAL"
    network_fs: bool = False
    """Open a file on a network filesystem anyway (refused otherwise)."""
    create: bool = True
    """Make the file (and its directory) and the board when missing; ``False``: refuse a board that does not exist."""


def parse_sqlite_url(url: str) -> tuple[SqliteOptions, dict[str, Any]]:
    """The file and session options of ``url``, and the board options (``max_attempts``...).

    :raises InvalidURL: no file named, an unknown option or a bad value.
    """
    parsed = parse_url(url)
    options = parse_options(parsed, OPTIONS)
    text = parsed.host_string + parsed.path
    if not text or text.endswith("/"):
        raise InvalidURL(f"{url!r} names no database file (sqlite:///abs/path/jobs.db or sqlite://./jobs.db)")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    if options.get("session_timeout", 5.0) < 0.5:
        raise InvalidURL("session_timeout must be at least 0.5 s")
    own = {name: options.pop(name) for name in list(options) if name in SqliteOptions.__slots__}
    return SqliteOptions(path, **own), options

