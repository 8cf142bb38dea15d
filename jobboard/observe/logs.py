"""Logging for workers and the command line: formats, levels, and the line per job.

Loggers: ``jobboard.worker`` (one INFO line per job outcome, start, drain,
summary), the backends' (``jobboard_memory``, ``jobboard_zookeeper``,
``jobboard_redis``: a lost and a regained connection are one WARNING line each),
and those of a third-party client library a backend uses (``aiozk``, under
zookeeper://), whose chatter is shown only at DEBUG. redis:// has no such
library: it talks to Redis with its own client (``jobboard_redis.client``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
CLIENT_LOGGERS = ("aiozk",)
"""Third-party client libraries of the backends: their records are demoted to DEBUG, under their own
names (the backend reports what matters in its own words; redis:// uses none)."""
JOB_FIELDS = ("outcome", "job_id", "job_name", "attempt", "max_attempts", "owner", "duration",
              "retry_in", "error", "reason")
"""Structured fields of the per-job line (``extra=``), emitted as keys by the JSON format."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, and the job fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        entry.update({key: getattr(record, key) for key in JOB_FIELDS if hasattr(record, key)})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class DemoteClientRecords(logging.Filter):
    """Backend client records become DEBUG: shown only with ``--log-level debug``."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".", 1)[0] in CLIENT_LOGGERS:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.threshold <= logging.DEBUG
        return True


def parse_level(text: str) -> int:
    """``debug``, ``info``, ``warning``, ``error`` (any case) to a logging level.

    :raises ValueError: naming the accepted values.
    """
    level = logging.getLevelName(text.strip().upper())
    if not isinstance(level, int):
        raise ValueError(  # noqa: TRY004 - a bad value, not a bad type
            f"unknown log level {text!r}; use debug, info, warning or error")
    return level


def configure(level: int = logging.INFO, fmt: LogFormat = "text", *, stream: Any = None) -> None:
    """Send every log record at ``level`` and above to stderr, one line each, with time and logger.

    Replaces the root logger's handlers (the command line owns its process).
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(DemoteClientRecords(level))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in CLIENT_LOGGERS:  # let their records reach the filter, which demotes them
        logging.getLogger(name).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)


def restore(handlers: list[logging.Handler], level: int) -> None:
    """Put back the root logger's ``handlers`` and ``level`` (undoing :func:`configure`)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
