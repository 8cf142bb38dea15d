"""``dict://``: a third-party job-board backend, registered in ``jobboard.backends`` like the in-tree ones."""

from __future__ import annotations

from jobboard_dict.backend import DictBackend as DictBackend
