"""Watching a board: the live view (:mod:`.live`), figures (:mod:`.stats`), Prometheus metrics (:mod:`.metrics`,
``jobboard[metrics]``), OpenTelemetry spans (:mod:`.tracing`, ``jobboard[otel]``) and logs (:mod:`.logs`).

Names are imported on first use (``import jobboard.observe`` stays cheap, and optional extras load only when used)."""

from __future__ import annotations

from jobboard._exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from jobboard.observe.live import LiveBoard
    from jobboard.observe.metrics import BoardCollector, WorkerMetrics
    from jobboard.observe.stats import BoardStats, WorkerView, read_stats
    from jobboard.observe.tracing import TracedBackend, TracedBoard, job_spans

__all__ = ["BoardCollector", "BoardStats", "LiveBoard", "TracedBackend", "TracedBoard", "WorkerMetrics", "WorkerView", "job_spans", "read_stats"]

__getattr__ = lazy_exports(__name__, {"BoardCollector": "metrics", "BoardStats": "stats", "LiveBoard": "live", "TracedBackend": "tracing", "TracedBoard": "tracing", "WorkerMetrics": "metrics", "WorkerView": "stats", "job_spans": "tracing", "read_stats": "stats"})
