"""The ``postgresql://`` job-board backend: a board in the application's own PostgreSQL database."""

from __future__ import annotations

from jobboard_postgresql.backend import PostgresBackend

__all__ = ["PostgresBackend"]
