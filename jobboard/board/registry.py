"""``open_board(url)``: find the backend for a URL's scheme through entry points.

Backends register in the entry-point group ``jobboard.backends`` with the URL
scheme as the name and a :class:`~jobboard.backend.Backend` subclass as the value
(constructed with the URL; the board is a :class:`~jobboard.board.contract.JobBoard` over it). In-tree backends are registered the same way;
the in-tree package ``jobboard_<extra>`` needs what ``pip install 'jobboard[<extra>]'``
installs (``jobboard_redis``, for ``redis://`` and ``rediss://``: ``jobboard[redis]``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from typing import cast

from jobboard.backend import Backend
from jobboard.board.contract import JobBoard
from jobboard.board.url import parse_url
from jobboard.errors import BackendNotFound

ENTRY_POINT_GROUP = "jobboard.backends"

BackendFactory = Callable[[str], Backend]

_found: tuple[Hashable, tuple[EntryPoint, ...]] | None = None
"""The last scan of the group, and the state of ``sys.path`` it was made in (see :func:`_backends`)."""


def installed_schemes() -> list[str]:
    """The URL schemes of every installed backend, sorted."""
    return sorted({entry.name for entry in _backends()})


def _backends() -> tuple[EntryPoint, ...]:
    """The group's entry points. Scanning every distribution's metadata takes milliseconds, so the
    last scan is kept while ``sys.path``, the current directory and the modification time of each
    directory on it are unchanged (what installing or removing a distribution changes, as for
    importlib's own directory caches). Not locked: two threads may both scan, with the same result."""
    global _found
    key = (entry_points, os.getcwd(), tuple((entry, _mtime(entry or ".")) for entry in sys.path))
    if _found is None or _found[0] != key:
        _found = (key, tuple(entry_points(group=ENTRY_POINT_GROUP)))
    return _found[1]


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:  # not there (yet): a scan finds nothing in it either
        return None


def open_board(url: str) -> JobBoard:
    """Make an (unopened) board for ``url``; open it with ``async with``.

    :raises InvalidURL: the URL cannot be parsed, or its backend rejects its options.
    :raises BackendNotFound: no backend for the scheme (listing the installed
        ones), or the backend's optional dependencies are missing (naming the
        ``pip install`` that fixes it).
    """
    scheme = parse_url(url).scheme
    matches = [entry for entry in _backends() if entry.name == scheme]
    if not matches:
        installed = ", ".join(installed_schemes()) or "none"
        raise BackendNotFound(f"no job-board backend for {scheme}:// (installed: {installed})")
    backend = _load(matches[0])(url)
    if not isinstance(backend, Backend):
        raise BackendNotFound(f"the {scheme}:// entry point {matches[0].value!r} made a {type(backend).__name__}, "
                              "not a jobboard.backend.Backend")
    return JobBoard(backend)


def _load(entry: EntryPoint) -> BackendFactory:
    try:
        return cast(BackendFactory, entry.load())
    except AttributeError as error:
        raise BackendNotFound(f"the {entry.name}:// backend's entry point {entry.value!r} is broken: {error}") from error
    except ImportError as error:
        raise BackendNotFound(
            f"the {entry.name}:// backend cannot be loaded ({error}); {_install_hint(entry)} to install what it needs"
        ) from error


def _install_hint(entry: EntryPoint) -> str:
    """``pip install 'jobboard[<extra>]'`` for an in-tree backend's package ``jobboard_<extra>``
    (the extra named after the package, not the URL scheme), else reinstalling its distribution."""
    dist = entry.dist.name if entry.dist else "jobboard"
    extra = entry.module.split(".", 1)[0].removeprefix("jobboard_")
    if dist == "jobboard" and extra in _jobboard_extras():
        return f"pip install 'jobboard[{extra}]'"
    return f"reinstall {dist}"


def _jobboard_extras() -> set[str]:
    try:
        return set(distribution("jobboard").metadata.get_all("Provides-Extra") or ())
    except PackageNotFoundError:  # run from a source tree that was never installed
        return set()
