"""The ``sqlite://`` job-board backend: one SQLite file shared by the processes of one host."""

from __future__ import annotations

from jobboard_sqlite.backend import SqliteBackend
from jobboard_sqlite.options import DEFAULT_BOARD

__all__ = ["DEFAULT_BOARD", "SqliteBackend"]
