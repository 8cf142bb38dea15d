"""What the command line prints: tables, times, and JSON that is always valid."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces, without trailing blanks."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines)


def format_time(timestamp: float | None) -> str:
    """A wall-clock timestamp as ISO 8601 in UTC, or ``-``."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def plain(value: Any) -> Any:
    """``value`` as strict JSON data: bytes decoded, odd keys and objects ``repr``-ed,
    tuples and sets as lists, ``inf``/``nan`` as the strings ``"Infinity"``/``"NaN"``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else json.dumps(value)
    if isinstance(value, Mapping):
        return {_key(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return repr(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    return json.dumps(plain(key)) if isinstance(key, (int, float, bool)) or key is None else repr(key)


def json_text(value: Any) -> str:
    """``value`` as valid (strict) JSON text."""
    return json.dumps(plain(value), indent=2, allow_nan=False)


def print_json(value: Any) -> None:
    print(json_text(value))


def first_line(text: str, limit: int = 100) -> str:
    """The first non-blank line of ``text``, cut at ``limit`` characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
