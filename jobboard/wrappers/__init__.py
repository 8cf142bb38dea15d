"""Backend wrappers: a backend over another backend (:mod:`.wrapped`), and the fault-injecting one (:mod:`.faulty`).

Names are imported on first use (``import jobboard.wrappers`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.wrappers.faulty import FaultyBackend, FaultyBoard
    from jobboard.wrappers.wrapped import WrappedBackend

__all__ = ["FaultyBackend", "FaultyBoard", "WrappedBackend"]

__getattr__ = lazy_exports(__name__, {"FaultyBackend": "faulty", "FaultyBoard": "faulty", "WrappedBackend": "wrapped"})
