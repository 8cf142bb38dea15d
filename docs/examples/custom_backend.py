"""How a third-party backend plugs in: an entry point in the group ``jobboard.backends``,
and the conformance suite run from the backend's own tests.

Nothing is registered here; the program lists the installed URL schemes, shows what
``open_board`` says about a scheme nobody installed, and checks that the two snippets
below are valid Python.

Run it with ``python docs/examples/custom_backend.py``.
"""



from __future__ import annotations

import ast
import tomllib

import anyio

from jobboard import BackendNotFound, installed_schemes, open_board

PYPROJECT = """\
# pyproject.toml of the distribution "jobboard-etcd"
[project.entry-points."jobboard.backends"]
etcd = "jobboard_etcd:EtcdBackend"   # URL scheme = a jobboard.backend.Backend subclass
"""

CONFORMANCE_TEST = '''\
# tests/test_conformance.py of "jobboard-etcd" (needs pytest-asyncio, asyncio_mode = "auto")
from __future__ import annotations

import uuid

import pytest

from jobboard import JobBoard
from jobboard.testing import JobBoardConformance
from jobboard_etcd import EtcdBackend


class TestEtcdConformance(JobBoardConformance):
    time_limit = 20.0   # seconds per test (default 15)
    delay_unit = 0.3    # seconds used for the retry_after checks

    @pytest.fixture
    def board_url(self) -> str:
        return f"etcd://localhost:2379/test-{uuid.uuid4().hex}"   # a fresh, empty board per test

    async def inject_malformed(self, board: JobBoard) -> None:
        assert isinstance(board.backend, EtcdBackend)
        await board.backend.write_raw_entry(b"not a posting")   # one job entry that is not a valid posting

    def next_id(self, job_id: str) -> str:
        return str(int(job_id) + 1)   # the id the board gives the job posted right after job_id
'''


async def main() -> None:
    print(f"installed schemes: {', '.join(installed_schemes())}")
    try:
        open_board("etcd://localhost:2379/jobs")
    except BackendNotFound as error:
        print(f"BackendNotFound: {error}")
    registered = tomllib.loads(PYPROJECT)["project"]["entry-points"]["jobboard.backends"]
    print(f"the pyproject snippet registers: {registered}")
    ast.parse(CONFORMANCE_TEST)
    print("the conformance test snippet is valid Python")


if __name__ == "__main__":
    anyio.run(main)
