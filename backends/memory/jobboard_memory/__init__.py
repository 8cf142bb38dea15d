"""The ``memory://`` job-board backend (embedded, in-process reference implementation)."""

from __future__ import annotations

from jobboard_memory.board import MemoryBackend, MemoryBoard

__all__ = ["MemoryBackend", "MemoryBoard"]
