"""A pytest plugin for the mutation run: records where every ``jobboard*`` module was imported from.

The runner copies it beside the tree's copies, loads it with ``-p jobboard_mutation_provenance``
and reads the file named by ``JOBBOARD_MUTATION_PROVENANCE``, so it can check the copy's
(mutated) code is what ran, not the checkout the venv's editable install points at.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

ENVIRONMENT = "JOBBOARD_MUTATION_PROVENANCE"


def loaded_files() -> dict[str, str]:
    """``{module: file}`` of every loaded module of the project's packages."""
    return {name: str(getattr(module, "__file__", None)) for name, module in sorted(sys.modules.items())
            if name.split(".")[0] in {"jobboard", "jobboard_memory", "jobboard_zookeeper", "jobboard_redis"}}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(ENVIRONMENT)
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(loaded_files(), out)
