"""The conformance suite every job-board backend must pass.

Use it from a backend's tests::

    from jobboard.testing import JobBoardConformance

    class TestMyBackend(JobBoardConformance):
        @pytest.fixture
        def board_url(self) -> str:
            return f"mine://localhost/{uuid.uuid4().hex}"   # a fresh board per test

        async def inject_malformed(self, board: JobBoard) -> None:
            ...  # write one entry that is not a valid posting

It needs pytest-asyncio (``asyncio_mode = "auto"``). Every test is bounded by
``time_limit`` seconds.
"""

from __future__ import annotations

from jobboard.testing._base import BoardOpener, ConformanceBase, bounded
from jobboard.testing._basics import BasicsConformance
from jobboard.testing._batches import BatchesConformance
from jobboard.testing._claims import ClaimsConformance
from jobboard.testing._delayed import DelayedConformance
from jobboard.testing._failures import FailuresConformance
from jobboard.testing._ids import IdsConformance
from jobboard.testing._keeping import KeepingConformance
from jobboard.testing._keys import KeysConformance
from jobboard.testing._linked import LinkedConformance
from jobboard.testing._listing import ListingConformance
from jobboard.testing._routing import RoutingConformance
from jobboard.testing._watching import WatchingConformance


class JobBoardConformance(
    BasicsConformance, BatchesConformance, ClaimsConformance, DelayedConformance, FailuresConformance,
    IdsConformance, KeepingConformance,
    KeysConformance, LinkedConformance, ListingConformance, RoutingConformance,
    WatchingConformance,
):
    """Every conformance check; see the module docstring."""


__all__ = ["BoardOpener", "ConformanceBase", "JobBoardConformance", "bounded"]
