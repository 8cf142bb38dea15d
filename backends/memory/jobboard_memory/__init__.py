"""The ``memory://`` job-board backend (embedded, in-process reference implementation)."""

from __future__ import annotations

from jobboard_memory.board import MemoryBoard

__all__ = ["MemoryBoard"]
