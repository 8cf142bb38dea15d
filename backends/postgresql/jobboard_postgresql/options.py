"""``postgresql://user:pass@host:5432/app?board=shop``: the application's own database URL, plus the board.

The board's options (below) are taken out of the query; every other query option is the driver's
(libpq's ``sslmode``, ``sslrootcert``, ``target_session_attrs``..., and server settings such as
``application_name``) and goes to the connection as given. ``postgres://`` is the same.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from jobboard.backend import (
    board_name,
    non_negative_float,
    parse_options,
    parse_url,
    positive_float,
    positive_int,
)
from jobboard.errors import InvalidURL

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def identifier(text: str) -> str:
    if not IDENTIFIER.match(text):
        raise ValueError("must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 41 characters)")
    return text


BOARD_OPTIONS: dict[str, Callable[[str], Any]] = {
    "board": board_name, "schema": identifier, "session_timeout": positive_float, "pool_size": positive_int,
    "idle_poll": positive_float, "reap_interval": positive_float, "connect_timeout": positive_float,
    "retry_window": non_negative_float, "max_attempts": positive_int, "max_posting_bytes": positive_int,
    "key_retention": non_negative_float, "result_ttl": non_negative_float, "trash_ttl": non_negative_float,
}


@dataclass(frozen=True, slots=True)
class Options:
    """Typed options of a ``postgresql://`` board URL (defaults documented in docs/backends/postgresql.md)."""

    dsn: str
    """The URL without the board's options: what the driver connects with."""
    board: str = "default"
    schema: str = "jobboard"
    session_timeout: float = 5.0
    """Seconds a silent owner (stopped, partitioned) keeps its claims: the server ends its session then."""
    pool_size: int = 10
    """Connections in the board's pool (its session's dedicated connection is one more)."""
    idle_poll: float = 1.0
    """Seconds between two looks of an idle ``wait()`` at the board when nobody wakes it."""
    reap_interval: float = 0.5
    """Seconds between two passes looking for sessions whose connection is gone."""
    connect_timeout: float = 10.0
    """Seconds an open keeps trying while the server refuses connections or is starting."""
    retry_window: float | None = None
    """Seconds a call retries transient failures (connection lost, server restarting) before
    ``BackendUnavailable``; default: twice the session timeout."""
    max_attempts: int | None = None
    max_posting_bytes: int | None = None
    key_retention: float | None = None
    result_ttl: float | None = None
    trash_ttl: float | None = None

    @property
    def ns(self) -> int:
        """The first key of this schema's advisory locks (a signed 32-bit hash of the schema name)."""
        return zlib.crc32(f"jobboard:{self.schema}".encode()) - 2**31

    @property
    def window(self) -> float:
        return 2 * self.session_timeout if self.retry_window is None else self.retry_window

    @property
    def call_timeout(self) -> float:
        """Seconds one statement (or one connection's acquire) of a pooled call may go unanswered before its
        connection is given up as lost (the client's own deadline: a partition or a frozen server sends no
        error): the retry window, at least the session timeout."""
        return max(self.window, self.session_timeout)


def parse(url: str) -> Options:
    """:raises InvalidURL: a bad option value, or not a postgresql:// or postgres:// URL."""
    parsed = parse_url(url)
    if parsed.scheme not in ("postgresql", "postgres"):
        raise InvalidURL(f"not a postgresql:// URL: {url!r}")
    ours = {key: value for key, value in parsed.query.items() if key in BOARD_OPTIONS}
    options = parse_options(parsed.__class__(parsed.scheme, parsed.hosts, parsed.path, ours), BOARD_OPTIONS)
    parts = urlsplit(url)
    theirs = [(key, value) for key, value in parsed.query.items() if key not in BOARD_OPTIONS]
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(theirs), ""))
    return Options(dsn=dsn, **options)
