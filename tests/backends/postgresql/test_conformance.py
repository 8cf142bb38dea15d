"""The conformance suite on postgresql://, against a real PostgreSQL 15 (tests/support/pgserver.py)."""

from __future__ import annotations

import os
import uuid

import pytest

from jobboard.board.contract import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_postgresql import PostgresBackend
from tests.support.pgserver import postgresql_url  # noqa: F401 (the fixture)

SCHEMA = f"conformance_{os.getpid()}"
"""This file's own schema (its ids' sequence): the suite runs on 2 workers, and another file's test posting in the
default schema meanwhile took the id ``next_id`` foretold (seen twice under load)."""


class TestPostgresConformance(JobBoardConformance):
    time_limit = 20.0

    @pytest.fixture
    def board_url(self, postgresql_url: str) -> str:  # noqa: F811
        return f"{postgresql_url}?board=conformance-{uuid.uuid4().hex}&schema={SCHEMA}"

    def next_id(self, job_id: str) -> str:
        return str(int(job_id) + 1)  # one sequence per schema; this file's own schema: nothing else posts in it

    async def inject_malformed(self, board: JobBoard) -> None:
        """A job row written by another tool: in the ready index like a job, its posting is not one."""
        backend = board.backend
        assert isinstance(backend, PostgresBackend) and backend.db.pool is not None
        s = f'"{backend.options.schema}"'
        await backend.db.pool.execute(
            f"INSERT INTO {s}.job (id, board, name, rank, state, posting) "
            f"VALUES (nextval('{backend.options.schema}.job_id'), $1, 'x', 2, 0, $2)",
            backend.options.board, b"\x93written by another tool")
