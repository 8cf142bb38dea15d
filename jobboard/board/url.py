"""Board URLs: ``scheme://[user:password@]host1:port,host2:port/path?key=value``.

The netloc is kept as a list of hosts (``urlsplit().port`` cannot parse
several), and query options are converted by type with unknown keys refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from jobboard.errors import InvalidURL


@dataclass(frozen=True, slots=True)
class BoardURL:
    """The parts of a board URL."""

    scheme: str
    hosts: tuple[str, ...] = ()
    path: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    username: str | None = None
    password: str | None = None

    @property
    def host_string(self) -> str:
        """The hosts joined by commas, as client libraries take them."""
        return ",".join(self.hosts)


def parse_url(url: str) -> BoardURL:
    """Split a board URL.

    :raises InvalidURL: no scheme, or a query key given twice.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidURL(f"not a board URL (expected scheme://...): {url!r}")
    parts = urlsplit(url)
    if not parts.scheme:
        raise InvalidURL(f"board URL {url!r} has no valid scheme (expected e.g. memory://name)")
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    username, password = _split_userinfo(userinfo)
    hosts = tuple(host for host in hostinfo.split(",") if host)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = dict(pairs)
    if len(query) != len(pairs):
        raise InvalidURL(f"a query option is given twice in {url!r}")
    return BoardURL(parts.scheme.lower(), hosts, unquote(parts.path), query, username, password)


def _split_userinfo(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, sep, password = userinfo.partition(":")
    return unquote(user), unquote(password) if sep else None


def parse_options(url: BoardURL, converters: Mapping[str, Callable[[str], Any]]) -> dict[str, Any]:
    """Convert the URL's query options with ``converters`` (one per known key).

    :raises InvalidURL: an unknown key (listing the known ones) or a bad value.
    """
    unknown = sorted(set(url.query) - set(converters))
    if unknown:
        known = ", ".join(sorted(converters)) or "none"
        raise InvalidURL(f"unknown option(s) {', '.join(unknown)} for {url.scheme}://; known: {known}")
    options: dict[str, Any] = {}
    for key, text in url.query.items():
        try:
            options[key] = converters[key](text)
        except ValueError as error:
            raise InvalidURL(f"bad value for option {key}={text!r}: {error}") from None
    return options


def board_name(text: str) -> str:
    """A board's name in a URL's query (``?board=``): 1 to 200 characters, none of a URL's separators (``?``,
    ``&``, ``=``, ``#``): ``?board=shop?create=0`` is a typo for ``&create=0``, not a new board named so."""
    if not text or len(text) > 200:
        raise ValueError("must be 1 to 200 characters")
    if found := sorted(set(text) & set("?&=#")):
        raise ValueError(f"must not contain {' or '.join(found)} (options are joined with &: ?board=NAME&option=VALUE)")
    return text


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be a positive integer")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError("must be a finite number >= 0")
    return value


COMMON_OPTIONS: dict[str, Callable[[str], Any]] = {
    "max_attempts": positive_int, "max_posting_bytes": positive_int, "key_retention": non_negative_float,
    "result_ttl": non_negative_float, "trash_ttl": non_negative_float,
}
"""The URL options every backend takes (``max_attempts`` is the default for posts that give none), with their
converters; a backend adds its own (``{**COMMON_OPTIONS, ...}``) and applies these with ``Backend.use_options``."""
