"""The conformance suite every job-board backend must pass.

Use it from a backend's tests::

    from jobboard.testing import JobBoardConformance

    class TestMyBackend(JobBoardConformance):
        @pytest.fixture
        def board_url(self) -> str:
            return f"mine://localhost/{uuid.uuid4().hex}"   # a fresh board per test

        async def inject_malformed(self, board: JobBoard) -> None:
            ...  # write one entry that is not a valid posting

        def next_id(self, job_id: str) -> str:
            ...  # the id the board gives the job posted right after job_id

It needs pytest-asyncio (``asyncio_mode = "auto"``). Every test is bounded by
``time_limit`` seconds. A backend that lacks an optional operation or option declares it in
``unsupported`` (names from ``OPTIONAL``): only the cases needing it skip; every other case fails
on ``Unsupported``. A suite whose boards wrap others overrides the ``make_board`` fixture.
"""

from __future__ import annotations

from jobboard.testing._base import OPTIONAL, BoardMaker, BoardOpener, ConformanceBase, bounded
from jobboard.testing._basics import BasicsConformance
from jobboard.testing._batches import BatchesConformance
from jobboard.testing._claims import ClaimsConformance
from jobboard.testing._delayed import DelayedConformance
from jobboard.testing._failures import FailuresConformance
from jobboard.testing._flow_waking import FlowWakingConformance
from jobboard.testing._ids import IdsConformance
from jobboard.testing._keeping import KeepingConformance
from jobboard.testing._keys import KeysConformance
from jobboard.testing._limit_edges import LimitEdgesConformance
from jobboard.testing._limits import LimitsConformance
from jobboard.testing._linked import LinkedConformance
from jobboard.testing._listing import ListingConformance
from jobboard.testing._pacing import PacingConformance
from jobboard.testing._prefetch import PrefetchConformance
from jobboard.testing._routing import RoutingConformance
from jobboard.testing._skips import SkipsConformance
from jobboard.testing._watching import WatchingConformance


class JobBoardConformance(
    BasicsConformance, BatchesConformance, ClaimsConformance, DelayedConformance, FailuresConformance,
    FlowWakingConformance, IdsConformance, KeepingConformance,
    KeysConformance, LimitEdgesConformance, LimitsConformance, LinkedConformance, ListingConformance,
    PacingConformance, PrefetchConformance, RoutingConformance, SkipsConformance,
    WatchingConformance,
):
    """Every conformance check; see the module docstring."""


__all__ = ["OPTIONAL", "BoardMaker", "BoardOpener", "ConformanceBase", "JobBoardConformance", "bounded"]
